"""The lm-eval battery's bookkeeping in the QA suite: which arguments each method is scored with, when a method's
file is stale, the precision it was scored at, and which methods a suite collects."""

import json

import pytest

from studies.qa.config import QASuiteConfig

SYNTHETIC = {"synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml"}}


def test_the_battery_scores_the_gate_the_suite_tuned(tmp_path):
    """memory-gate's lm-eval arguments name the gate its offset was chosen for: the question gate when the suite
    trained one, else the run's own."""
    from mlpmem.errors import ConfigError
    from studies.qa.battery import model_args

    cfg = QASuiteConfig(out_dir=str(tmp_path), benchmarks=SYNTHETIC,
                        no_regression={"memory_from": "synthetic"})
    methods, gate = tmp_path / "synthetic" / "methods", tmp_path / "synthetic" / "gate-questions"
    methods.mkdir(parents=True)
    gate.mkdir()
    (gate / "gate.json").write_text(json.dumps({"weights_sha256": "abc"}))
    scored = {"gate_offset": 1.5, "gate_training": "questions", "question_gate": {"weights_sha256": "abc"}}
    (methods / "memory-gate.json").write_text(json.dumps(scored))
    assert model_args(cfg, "memory-gate") == (f"run={tmp_path / 'synthetic' / 'memory-run'},gate=true,"
                                              f"gate_offset=1.5,gate_dir={gate},precision=fp32")
    (gate / "gate.json").write_text(json.dumps({"weights_sha256": "another"}))  # retrained since, e.g. other questions
    with pytest.raises(ConfigError, match="not the one memory-gate was scored with"):
        model_args(cfg, "memory-gate")
    (methods / "memory-gate.json").write_text(json.dumps({"gate_offset": 3.0}))
    assert model_args(cfg, "memory-gate").endswith(",gate=true,gate_offset=3.0,precision=fp32")
    (methods / "memory-gate.json").write_text(json.dumps({"gate_offset": 0.0, "gate_floor": 0.2}))
    assert model_args(cfg, "memory-gate").endswith(",gate=true,gate_offset=0.0,gate_floor=0.2,precision=fp32")


def test_a_battery_file_is_scored_again_when_its_memory_gate_or_arguments_change(tmp_path):
    from studies.qa.battery import _scored_with

    cfg = QASuiteConfig(out_dir=str(tmp_path), benchmarks=SYNTHETIC,
                        no_regression={"memory_from": "synthetic"}, battery={})
    bench, memory = tmp_path / "synthetic", tmp_path / "synthetic" / "memory-run" / "memory"
    (bench / "methods").mkdir(parents=True)
    memory.mkdir(parents=True)
    run_results = bench / "memory-run" / "results.json"
    run_results.write_text(json.dumps({"lambda": 0.5}))
    (bench / "memory-run" / "knnlm").mkdir()
    (bench / "memory-run" / "knnlm" / "results.json").write_text(json.dumps({"chosen": {"lambda": 0.2}}))

    def weights(data: bytes):
        from mlpmem.utils.checksums import record_folder

        (memory / "model.safetensors").write_bytes(data)
        record_folder(memory, ["model.safetensors"])

    weights(b"one")
    first = {m: _scored_with(cfg, m) for m in ("memory", "knnlm")}
    assert first["memory"]["memory_sha256"] and "memory_sha256" not in first["knnlm"]
    weights(b"two")  # the memory trained again: its battery file is stale, kNN-LM's is not
    assert _scored_with(cfg, "memory") != first["memory"] and _scored_with(cfg, "knnlm") == first["knnlm"]
    run_results.write_text(json.dumps({"lambda": 0.35}))  # another λ chosen
    assert ",lam=0.35," in _scored_with(cfg, "memory")["model_args"]
    (bench / "methods" / "memory.json").write_text(json.dumps({"lambda": 0.0}))  # the QA-tuned λ: not the battery's
    assert ",lam=0.35," in _scored_with(cfg, "memory")["model_args"]
    gate = bench / "gate-questions"
    gate.mkdir()
    for sha in ("abc", "def"):  # the question gate retrained in its folder: same model args, another file
        (gate / "gate.json").write_text(json.dumps({"weights_sha256": sha}))
        scored = {"gate_offset": 0.0, "gate_training": "questions", "question_gate": {"weights_sha256": sha}}
        (bench / "methods" / "memory-gate.json").write_text(json.dumps(scored))
        assert _scored_with(cfg, "memory-gate")["gate_sha256"] == sha


def test_the_battery_precision_reaches_every_methods_model_args(tmp_path):
    """The precision is named in every method's arguments (a bf16 file is another file than fp32's)."""
    from mlpmem.errors import ConfigError
    from studies.qa.battery import model_args

    def cfg(**battery):
        return QASuiteConfig(out_dir=str(tmp_path), benchmarks=SYNTHETIC,
                             no_regression={"memory_from": "synthetic"}, battery=battery)

    (tmp_path / "synthetic" / "memory-run").mkdir(parents=True)
    (tmp_path / "synthetic" / "memory-run" / "results.json").write_text(json.dumps({"lambda": 0.5}))
    for method in ("backbone", "memory", "lora", "rag-bm25"):
        plain = model_args(cfg(), method)
        assert plain.endswith(",precision=fp32") and model_args(cfg(precision="fp32"), method) == plain
        assert model_args(cfg(precision="bf16"), method) == plain.replace("precision=fp32", "precision=bf16")
    with pytest.raises(ConfigError, match="battery.precision must be one of"):
        cfg(precision="half")


def test_the_battery_report_names_the_precision_each_file_was_scored_at():
    from studies.qa.battery import SCORED_WITH, scored_precision
    from studies.qa.battery_report import precision_line

    assert scored_precision({SCORED_WITH: {"model_args": "run=r,lam=0.5"}}) == "fp32"
    assert scored_precision({SCORED_WITH: {"model_args": "run=r,method=backbone,precision=bf16"}}) == "bf16"
    assert scored_precision({}) == "fp32"  # a file from before the record
    assert precision_line({"backbone": "bf16", "memory": "bf16"}, {}) == (
        "Every method scored at bf16 (autocast, `battery.precision`).")
    mixed = precision_line({"backbone": "fp32", "memory": "bf16"}, {"memory": "MLP Memory"})
    assert "different precisions" in mixed and "backbone fp32, MLP Memory bf16" in mixed


def test_the_battery_collected_is_the_suites_methods(tmp_path):
    """A variant suite over the same folder reports its own battery methods, not every file there."""
    from studies.qa.battery import SCORED_WITH, WALL_SECONDS, battery_dir, collect_battery

    folder = battery_dir(tmp_path)
    folder.mkdir(parents=True)
    for method in ("backbone", "memory", "knnlm"):
        (folder / f"{method}.json").write_text(json.dumps({SCORED_WITH: {}, WALL_SECONDS: 60.0}))
    suite = {"out_dir": str(tmp_path), "benchmarks": SYNTHETIC,
             "no_regression": {"memory_from": "synthetic"}}
    found = collect_battery(QASuiteConfig(**suite, battery={"methods": ["backbone", "memory"]}))
    assert set(found["methods"]) == {"backbone", "memory"} and found["wall_seconds"]["memory"] == 60.0
    assert collect_battery(QASuiteConfig(**suite, battery=None)) is None
    assert collect_battery(QASuiteConfig(**suite, battery={"methods": ["backbone", "knnlm"]}))["methods"].keys() == {
        "backbone", "knnlm"}


def _scored_file(tasks: list[str], model_args: str = "run=r,method=backbone,precision=fp32") -> dict:
    """A battery file as the stage writes it, scored on ``tasks`` (lm-eval's groups, their samples, the record)."""
    from studies.qa.battery import SCORED_WITH, WALL_SECONDS

    groups = {"mlpmem_battery": ["mlpmem_polarity", "mlpmem_analogy_family"],
              "mlpmem_halueval_detect": ["mlpmem_halueval_detect_qa", "mlpmem_halueval_detect_dialogue"]}
    leaves = [leaf for t in tasks for leaf in groups.get(t, [t])]
    sample = [{"doc_id": 0, "doc": {"id": "a"}, "acc": 1.0}]
    return {"group_subtasks": {g: s for g, s in groups.items() if g in tasks},
            "samples": {t: sample for t in leaves}, "results": {t: {"acc,none": 1.0} for t in leaves},
            "configs": {t: {} for t in leaves}, WALL_SECONDS: 60.0,
            SCORED_WITH: {"model_args": model_args, "tasks": tasks, "limit": None, "task_settings": {"seed": 0}}}


def test_a_battery_file_scored_on_more_tasks_serves_a_call_that_asks_for_fewer():
    """A file holds the tasks asked when they are among its tasks (groups expanded by lm-eval's record); other model
    args, task settings or a task it lacks make it stale."""
    from studies.qa.battery import SCORED_WITH, covers, leaf_tasks

    record = _scored_file(["mlpmem_battery", "mlpmem_halueval_detect"])
    asked = dict(record[SCORED_WITH])
    assert leaf_tasks(record, ["mlpmem_halueval_detect", "mlpmem_polarity"]) == [
        "mlpmem_halueval_detect_qa", "mlpmem_halueval_detect_dialogue", "mlpmem_polarity"]
    assert covers(record, asked)
    assert covers(record, {**asked, "tasks": ["mlpmem_halueval_detect"]})
    assert covers(record, {**asked, "tasks": ["mlpmem_halueval_detect_qa", "mlpmem_polarity"]})
    assert not covers(record, {**asked, "tasks": ["mlpmem_halueval_detect", "mlpmem_halueval_prefer"]})
    assert not covers(record, {**asked, "tasks": ["mlpmem_halueval_detect"], "model_args": "run=r,method=memory"})
    assert not covers(record, {**asked, "task_settings": {"seed": 1}})
    assert not covers({k: v for k, v in record.items() if k != SCORED_WITH}, asked)


def test_the_report_reads_only_the_tasks_the_suite_asked_for(tmp_path):
    """A call asking for detection alone reuses the backbone file scored on the battery too, and its report reads
    detection alone from it; the file is named as holding more tasks than the report shows."""
    from studies.qa.battery import battery_dir, battery_results, collect_battery

    folder = battery_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / "backbone.json").write_text(json.dumps(_scored_file(["mlpmem_battery", "mlpmem_halueval_detect"])))
    (folder / "rag-dense.json").write_text(json.dumps(_scored_file(["mlpmem_halueval_detect"], "method=rag-dense")))
    suite = {"out_dir": str(tmp_path), "benchmarks": SYNTHETIC, "no_regression": {"memory_from": "synthetic"},
             "methods": ["backbone", "memory", "rag-dense"]}
    stage = collect_battery(QASuiteConfig(**suite, battery={"methods": ["backbone", "rag-dense"],
                                                           "tasks": ["mlpmem_halueval_detect"]}))
    assert stage["tasks"] == ["mlpmem_halueval_detect_qa", "mlpmem_halueval_detect_dialogue"]
    assert stage["more_tasks"] == ["backbone"]
    base = battery_results(stage, "backbone")
    assert set(base["samples"]) == set(base["results"]) == set(stage["tasks"])
    assert set(battery_results({**stage, "tasks": None}, "backbone")["samples"]) == {
        "mlpmem_polarity", "mlpmem_analogy_family", *stage["tasks"]}


def test_the_scoring_times_name_files_scored_on_tasks_the_report_does_not_show():
    from studies.qa.battery_report import battery_section, scoring_times

    line = scoring_times({"backbone": 600.0, "rag-dense": 120.0}, {"rag-dense": "RAG-dense"}, [], ["backbone"])
    assert "backbone 10 min, RAG-dense 2 min" in line and "files of backbone were scored on more tasks" in line
    assert "more tasks" not in scoring_times({"backbone": 600.0}, {})
    stage = {"methods": {}, "wall_seconds": {"backbone": 600.0}, "more_tasks": ["backbone"]}
    not_asked = battery_section({}, {}, None, stage)
    assert not_asked.startswith("(not asked: `battery.tasks`") and "files of backbone were scored on more" in not_asked
    assert battery_section({}, {}, None, None).startswith("(not run")
