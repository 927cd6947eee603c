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
