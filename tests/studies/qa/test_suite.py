"""Every QA method end to end on a tiny backbone and a tiny synthetic benchmark, through the CLI, plus the report."""

import json
from pathlib import Path

import pytest
import yaml

from helpers.bigbench import write_archive
from helpers.corpus import corpus_text
from helpers.encoders import BagOfWordsEncoder
from mlpmem.baselines.methods import METHODS
from mlpmem.config import read_yaml
from mlpmem.errors import MlpmemError
from studies.cli import main
from studies.qa.config import BENCHMARKS, QASuiteConfig
from studies.qa.per_item import item_scores, without_per_item

CONFIGS = Path(__file__).resolve().parents[3] / "studies" / "qa" / "configs"
MEMORY_RUNS = sorted(CONFIGS.glob("qa-*.yaml"))
"""The pipeline presets of the suite's memory runs."""
SUITES = sorted(set(CONFIGS.glob("*.yaml")) - set(MEMORY_RUNS))

BIGBENCH = {
    "qa_wikidata": {"examples": [{"input": "The keeper of the lighthouse is", "target": "old"},
                                 {"input": "The color of the book is", "target": ["green"]}]},
    "general_knowledge": {"examples": [
        {"input": "What did the keeper count?", "target_scores": {"gulls": 1, "storms": 0}},
        {"input": "When did the storm come?", "target_scores": {"spring": 0, "November": 1}}]},
}


@pytest.fixture()
def qa_setup(tmp_path, tiny_backbone_dir, monkeypatch):
    import mlpmem.baselines.rag as rag

    monkeypatch.setattr(rag, "load_encoder", lambda device="cpu": BagOfWordsEncoder())
    archive = write_archive(tmp_path / "bigbench-1.0.0.tar.gz", BIGBENCH)
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(archive))
    tiny = read_yaml("tiny")
    tiny["backbone"]["name"] = str(tiny_backbone_dir)
    tiny["train"]["epochs"] = 1
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump(tiny))
    corpus = tmp_path / "ablate-corpus"
    corpus.mkdir()
    for i, text in enumerate(corpus_text(10)):
        (corpus / f"doc{i}.txt").write_text(text)
    (tmp_path / "ablate.yaml").write_text(yaml.safe_dump({**tiny, "run_dir": str(tmp_path / "ablate"),
                                                          "corpus": {**tiny["corpus"], "path": str(corpus)}}))
    suite = {
        "out_dir": str(tmp_path / "qa"), "docs_dir": str(tmp_path / "docs"), "backbone": str(tiny_backbone_dir),
        "benchmarks": {"synthetic": {"pipeline": str(tmp_path / "memory.yaml"),
                                     "options": {"num_entities": 12, "seed": 0}, "tune_questions": 4,
                                     "test_questions": 6}},
        "lambda_grid": [0.0, 0.5],
        "gate_offset_grid": [0.0, 3.0],
        "gate_floor_grid": [0.0, 0.4],
        "shots": 2,
        "cpt": {"epochs": 1, "batch_size": 2, "block_size": 32, "lr": 1e-3},
        "lora": {"finetune": {"epochs": 1, "batch_size": 2, "block_size": 32, "lr": 1e-3}},
        "generation": {"max_new_tokens": 4, "batch_size": 4},
        "no_regression": {"memory_from": "synthetic", "qa_wikidata": 2, "mc_tasks": ["general_knowledge"],
                          "mc_limit": 2},
        "ablations": {"pipeline": str(tmp_path / "ablate.yaml"), "studies": ["alpha"]},
        "battery": {"methods": ["backbone", "rag-bm25", "cpt", "memory", "memory-gate"], "tasks": ["mlpmem_bigbench"],
                    "mc_tasks": ["general_knowledge"], "mc_limit": 2, "battery_limit": 0, "detect_limit": 0,
                    "batch_size": 4},
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return tmp_path


def test_qa_report_end_to_end(qa_setup, capsys):
    tmp = qa_setup
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet"]) == 0
    results = json.loads((tmp / "qa" / "results.json").read_text())
    bench = results["benchmarks"]["synthetic"]
    assert set(bench["methods"]) == set(METHODS)
    for method, r in bench["methods"].items():
        assert 0 <= r["test"]["em"] <= 100 and r["test"]["n"] == 6, method
        assert r["held_out"]["n"] == 6
    assert bench["methods"]["memory"]["lambda"] in (0.0, 0.5)
    assert bench["methods"]["knnlm"]["lambda"] in (0.0, 0.5)
    assert bench["methods"]["lora"]["rank"] >= 1
    gated = bench["methods"]["memory-gate"]  # the gate trained on the memory run's validation text, then used
    assert gated["gate"] is True and 0.0 <= gated["gate_text_ppl"]["mean_gate"] <= 1.0
    assert gated["gate_offset"] in (0.0, 3.0) and [r["offset"] for r in gated["gate_offset_curve"]] == [0.0, 3.0]
    assert gated["gate_floor"] in (0.0, 0.4) and [r["floor"] for r in gated["gate_floor_curve"]] == [0.0, 0.4]
    assert (tmp / "qa" / "synthetic" / "memory-run" / "gate" / "gate.json").is_file()
    assert bench["methods"]["lora"]["target_parameters"] == bench["memory_run"]["memory_trainable_parameters"]
    weights = tmp / "qa" / "synthetic" / "weights"  # what lm-eval's method=cpt|lora loads
    assert (weights / "cpt" / "model.safetensors").is_file() and (weights / "lora" / "adapter_config.json").is_file()
    nr = bench["methods"]["backbone"]["no_regression"]
    assert nr["qa_wikidata"]["n"] == 2 and nr["general_knowledge"]["n"] == 2
    assert "no_regression" in bench["methods"]["memory"] and "no_regression" not in bench["methods"]["rag-bm25"]
    assert len(results["ablations"]["studies"]["alpha"]) == 6
    _check_per_item(tmp, bench)
    _check_battery(tmp, results)
    report = (tmp / "docs" / "report.md").read_text()
    for label in ("RAG-dense", "RAG-BM25", "kNN-LM", "CPT", "LoRA", "MLP Memory", "C1:", "C3:", "C7:", "C8:",
                  "Δ vs backbone [95 % CI]", "![Δ F1 vs backbone](qa-delta-f1.png)"):
        assert label in report, label
    assert (tmp / "docs" / "ablation-alpha.png").exists() and (tmp / "docs" / "qa-delta-f1.png").exists()
    assert "| epochs kept of trained |" in report and (tmp / "docs" / "learning-curve-synthetic.png").stat().st_size > 0
    intervals = json.loads((tmp / "docs" / "results.json").read_text())["intervals"]
    memory = intervals["qa"]["synthetic"]["methods"]["memory"]["test"]
    assert intervals["qa"]["synthetic"]["n_test"] == 6 and memory["f1"]["stderr"] is not None
    assert memory["delta_vs_base"]["f1"]["n"] == 6 and len(memory["delta_vs_base"]["f1"]["ci95"]) == 2
    assert set(intervals["no_regression"]) == {"qa_wikidata", "general_knowledge"}
    # resumable: a second run reuses every method's results (and the battery's)
    mtime = (tmp / "qa" / "synthetic" / "methods" / "cpt.json").stat().st_mtime
    battery = (tmp / "qa" / "battery" / "memory.json").stat().st_mtime
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--no-ablations"]) == 0
    assert (tmp / "qa" / "synthetic" / "methods" / "cpt.json").stat().st_mtime == mtime
    assert bench["methods"]["memory"]["settings"]["lambda_grid"] == [0.0, 0.5]
    assert (tmp / "qa" / "battery" / "memory.json").stat().st_mtime == battery
    assert "suite.yaml --no-ablations`" in (tmp / "docs" / "report.md").read_text()  # the command as it ran
    assert len(json.loads((tmp / "qa" / "calls.json").read_text())) == 2  # each computing call is logged
    (tmp / "qa" / "synthetic" / "methods" / "lora.json").unlink()  # as if interrupted before LoRA finished
    (tmp / "docs" / "report.md").unlink()
    knnlm = tmp / "qa" / "synthetic" / "methods" / "knnlm.json"  # as if written before per-item scores were kept
    knnlm.write_text(json.dumps(without_per_item(json.loads(knnlm.read_text()))))
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--report-only"]) == 0
    assert not (tmp / "qa" / "synthetic" / "methods" / "lora.json").exists()
    report = (tmp / "docs" / "report.md").read_text()
    assert "| LoRA |" not in report and "| CPT |" in report and "ablation-alpha.png" in report
    assert "| kNN-LM | synthetic | F1 | — |" in report and "(no interval) | no interval |" in report
    # ablations of another configuration of the ablation run are not reported as this one's
    ablate = yaml.safe_load((tmp / "ablate.yaml").read_text())
    ablate["train"]["lr"] = 0.5
    (tmp / "ablate.yaml").write_text(yaml.safe_dump(ablate))
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--report-only"]) == 0
    assert "ablation-alpha.png" not in (tmp / "docs" / "report.md").read_text()
    _check_question_gate(tmp, capsys)
    _check_memory_trained_again(tmp)


def _check_question_gate(tmp: Path, capsys) -> None:
    """gate_training: questions rescores memory-gate alone, with a gate trained on the validation questions."""
    methods = tmp / "qa" / "synthetic" / "methods"
    suite = yaml.safe_load((tmp / "suite.yaml").read_text())
    (tmp / "suite.yaml").write_text(yaml.safe_dump({**suite, "gate_training": "questions", "battery": None}))
    kept = {m: (methods / f"{m}.json").stat().st_mtime for m in ("memory", "knnlm", "cpt")}
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--no-ablations"]) == 0
    assert {m: (methods / f"{m}.json").stat().st_mtime for m in kept} == kept
    gated = json.loads((methods / "memory-gate.json").read_text())
    record = json.loads((tmp / "qa" / "synthetic" / "gate-questions" / "gate.json").read_text())
    validation = [json.loads(x)["id"] for x in (tmp / "qa" / "synthetic" / "data" / "questions" / "validation.jsonl")
                  .read_text().splitlines()][:4]
    assert gated["gate_training"] == "questions" and record["questions"] == validation
    assert gated["settings"]["gate"]["gate_training"] == "questions"
    assert gated["question_gate"]["weights_sha256"] == record["weights_sha256"]
    assert record["init_lambda"] == json.loads((methods / "memory.json").read_text())["lambda"]
    assert set(gated["gate_mean_lambda"]) == {"questions"} and 0 < gated["gate_mean_lambda"]["questions"] < 1
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--no-ablations", "--report-only",
                 "--set", "gate_offset_grid=[0.0, 3.0]"]) == 0  # the report's command: each --set shell-quoted
    assert f"`python -m studies qa report {tmp / 'suite.yaml'} --set 'gate_offset_grid=[0.0, 3.0]' --no-ablations`" in \
        capsys.readouterr().out


def _check_memory_trained_again(tmp: Path) -> None:
    """A pipeline config that now trains the memory otherwise retrains it on the same datastore and teacher, and
    rescores the methods that read it (their gates retrained for it), and only those."""
    from mlpmem.utils.checksums import recorded

    run, methods = tmp / "qa" / "synthetic" / "memory-run", tmp / "qa" / "synthetic" / "methods"
    before = recorded(run / "memory")["model.safetensors"]
    kept = {m: (methods / f"{m}.json").stat().st_mtime for m in ("knnlm", "cpt", "backbone")}
    teacher = (run / "teacher" / "manifest.json").stat().st_mtime
    memory = yaml.safe_load((tmp / "memory.yaml").read_text())
    memory["train"].update(lr=memory["train"]["lr"] / 2, epochs=2, eval_every=0.5, patience=1)
    (tmp / "memory.yaml").write_text(yaml.safe_dump(memory))
    assert main(["qa", "report", str(tmp / "suite.yaml"), "--quiet", "--no-ablations"]) == 0
    after = recorded(run / "memory")["model.safetensors"]
    assert after != before and (run / "teacher" / "manifest.json").stat().st_mtime == teacher
    assert {m: (methods / f"{m}.json").stat().st_mtime for m in kept} == kept
    for method in ("memory", "memory-gate"):
        assert json.loads((methods / f"{method}.json").read_text())["settings"]["memory"] == after, method
    state, results = (json.loads((run / name).read_text()) for name in ("train/train_state.json", "results.json"))
    best = next(h["epoch"] for h in state["history"] if h["step"] == state["best_step"])
    assert results["epochs_kept"] == (best if state["restored_best"] else results["epochs"]) and results["epochs"] == 2
    checksum = _memory_checksum(run, yaml.safe_load((tmp / "suite.yaml").read_text())["backbone"])
    for gate in (run / "gate", tmp / "qa" / "synthetic" / "gate-questions"):  # both gates now this memory's
        assert json.loads((gate / "gate.json").read_text())["memory_sha256"] == checksum, gate


def _memory_checksum(run: Path, backbone: str) -> str:
    from mlpmem.backbone import load_backbone
    from mlpmem.inference.gate_io import memory_checksum
    from mlpmem.memory import MLPMemory

    model, tokenizer = load_backbone(backbone)
    memory = MLPMemory.from_pretrained(run / "memory", backbone_model=model, backbone_tokenizer=tokenizer)
    return memory_checksum(memory)


def _check_battery(tmp: Path, results: dict) -> None:
    """Every battery method scored by lm-eval on the models of the synthetic benchmark, paired in the report."""
    files = results["battery"]["methods"]
    assert set(files) == {"backbone", "rag-bm25", "cpt", "memory", "memory-gate"}
    memory = json.loads(Path(files["memory"]).read_text())
    assert memory["mlpmem_one_pass"] == ["backbone", "memory", "memory-gate"]  # one backbone pass for the three
    assert "mlpmem_one_pass" not in json.loads(Path(files["cpt"]).read_text())
    counts = json.loads(Path(files["rag-bm25"]).read_text())["mlpmem_rag_contexts"]
    assert counts["contexts"] > 0 and counts["without_passages"] == 0
    lam = results["benchmarks"]["synthetic"]["memory_run"]["lambda"]
    assert memory["config"]["mlpmem"]["lam"] == lam  # the perplexity-chosen λ, the mixture a user gets
    assert len(memory["samples"]["mlpmem_bb_general_knowledge"]) == 2
    gated = json.loads(Path(files["memory-gate"]).read_text())["config"]["mlpmem"]
    assert gated["gate"] is True and gated["gate_offset"] == results["benchmarks"]["synthetic"]["methods"][
        "memory-gate"]["gate_offset"]
    report = (tmp / "docs" / "report.md").read_text()
    assert "## General capability through lm-eval (the battery)" in report and "| MLP Memory + gate |" in report
    assert f"RAG-BM25 0 of {counts['contexts']} distinct contexts." in report
    assert "Every method scored at fp32." in report and set(results["battery"]["precision"].values()) == {"fp32"}
    assert (tmp / "docs" / "battery-delta.png").stat().st_size > 0
    intervals = json.loads((tmp / "docs" / "results.json").read_text())["battery_intervals"]
    assert intervals["memory"]["mlpmem_bb_general_knowledge"]["acc"]["n_items"] == 2
    seconds = results["battery"]["wall_seconds"]
    assert set(seconds) == set(files) and all(s > 0 for s in seconds.values())
    assert "Scoring time (the battery stage's wall time per method" in report
    assert "backbone, MLP Memory, MLP Memory + gate were scored from one backbone pass" in report
    cost = report.split("## What it cost")[1]
    assert "| the lm-eval battery, every method |" in cost and "not recorded" not in cost
    assert "| every computing call of the suite in its out_dir (1), wall clock" in cost
    calls = json.loads((tmp / "qa" / "calls.json").read_text())
    assert len(calls) == 1 and calls[0]["seconds"] > 0
    assert "Items whose log-likelihood choice (acc) differs from the backbone's" in report
    shifts = json.loads((tmp / "docs" / "results.json").read_text())["battery_choice_shift"]
    assert shifts["memory"]["mlpmem_bb_general_knowledge"]["items"] == 2
    c7 = next(c for c in json.loads((tmp / "docs" / "results.json").read_text())["claims"] if c["id"] == "C7")
    assert c7["ours"].startswith("lm-eval battery")


def _check_per_item(tmp: Path, bench: dict) -> None:
    """Every method file keeps each question's EM / F1 by id; the battery each item's correctness."""
    for method, r in bench["methods"].items():
        saved = json.loads((tmp / "qa" / "synthetic" / "methods" / f"{method}.json").read_text())
        for split in ("test", "held_out"):
            em, f1 = item_scores(saved[split], "em"), item_scores(saved[split], "f1")
            assert len(em) == len(f1) == r[split]["n"] == 6, (method, split)
            assert 100 * sum(em.values()) / 6 == pytest.approx(r[split]["em"]), (method, split)
            assert set(em) == {q["id"] for q in saved[split]["predictions"]}  # all 6 kept (sample of 20)
    nr = bench["methods"]["memory"]["no_regression"]
    assert len(item_scores(nr["qa_wikidata"], "em")) == 2
    assert set(item_scores(nr["general_knowledge"], "acc_pmi").values()) <= {0.0, 1.0}


def test_eval_qa_command(qa_setup, tiny_backbone_dir, capsys):
    tmp = qa_setup
    questions = tmp / "q.jsonl"
    questions.write_text(json.dumps({"question": "Who counted the gulls?", "answers": ["the keeper"]}) + "\n")
    docs = tmp / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus_text(4)))
    for method in ("backbone", "rag-bm25", "rag-dense"):
        out = tmp / f"{method}.json"
        assert main(["qa", "eval", str(questions), "--method", method, "--backbone", str(tiny_backbone_dir),
                     "--corpus", str(docs), "--max-new-tokens", "3", "--out", str(out), "--quiet"]) == 0
        saved = json.loads(out.read_text())
        assert saved["n"] == 1 and len(saved["predictions"]) == 1
    assert main(["qa", "eval", str(questions), "--method", "memory", "--backbone", str(tiny_backbone_dir)]) == 2
    assert "needs --run" in capsys.readouterr().err


def test_suite_config_validation(tmp_path):
    from mlpmem.errors import ConfigError

    with pytest.raises(ConfigError):
        QASuiteConfig(benchmarks={"trivia": {"pipeline": "x"}})
    with pytest.raises(ConfigError):
        QASuiteConfig(benchmarks={"synthetic": {"pipeline": "x"}}, methods=["memory"])
    with pytest.raises(ConfigError, match="shots"):
        QASuiteConfig(benchmarks={"synthetic": {"pipeline": "x"}}, shots=-1)
    with pytest.raises(ConfigError, match="gate_offset_grid"):
        QASuiteConfig(benchmarks={"synthetic": {"pipeline": "x"}}, gate_offset_grid=[])
    for preset in SUITES:  # every QA suite preset loads
        cfg = QASuiteConfig.from_yaml(str(preset))
        assert cfg.benchmarks and set(cfg.benchmarks) <= set(BENCHMARKS), preset
        assert {"backbone", "memory"} <= set(cfg.methods) <= set(METHODS), preset
    default = QASuiteConfig.from_yaml("studies/qa/configs/report.yaml")  # installable data only
    assert list(default.benchmarks) == ["halueval_qa"] and not default.battery.mc_tasks
    assert not default.battery.truthfulness and not default.no_regression.mc_tasks
    assert default.no_regression.qa_wikidata == 0 and default.ablations is None
    assert set(default.battery.methods) == set(default.methods)  # every method on the battery and hallucination
    assert default.generation.precision == default.battery.precision == "auto"  # fp32 where bf16 is emulated
    core = QASuiteConfig.from_yaml("studies/qa/configs/core.yaml")  # the same questions, the backbone and memory
    assert core.methods == core.battery.methods == core.no_regression.methods == ["backbone", "memory"]
    assert core.benchmarks == default.benchmarks and core.battery.tasks == default.battery.tasks
    assert (core.battery.battery_limit, core.battery.detect_limit) == (default.battery.battery_limit,
                                                                      default.battery.detect_limit)


def test_a_report_only_call_records_the_precision_the_computing_call_resolved(tmp_path):
    from studies.qa.suite import recorded_precision

    auto = QASuiteConfig(out_dir=str(tmp_path), benchmarks={"synthetic": {"pipeline": "x"}},
                         generation={"precision": "auto"}, battery={"precision": "auto"})
    assert recorded_precision(auto).generation.precision == "auto"  # nothing computed yet: nothing to say
    config = {"generation": {"precision": "fp32"}, "battery": {"precision": "bf16"}}
    (tmp_path / "results.json").write_text(json.dumps({"config": config}))
    resolved = recorded_precision(auto)
    assert (resolved.generation.precision, resolved.battery.precision) == ("fp32", "bf16")
    named = recorded_precision(QASuiteConfig(out_dir=str(tmp_path), benchmarks={"synthetic": {"pipeline": "x"}},
                                             generation={"precision": "bf16"}, battery=None))
    assert named.generation.precision == "bf16" and named.battery is None  # a named precision is kept


@pytest.mark.parametrize("native", [True, False])
def test_a_computing_call_resolves_auto_precision_on_its_machine(native, monkeypatch):
    from studies.qa.suite import machine_precision

    monkeypatch.setattr("mlpmem.compute.cpu_has_native_bf16", lambda: native)
    auto = QASuiteConfig(benchmarks={"synthetic": {"pipeline": "x"}}, generation={"precision": "auto"},
                         battery={"precision": "auto"})
    resolved = machine_precision(auto, "cpu")
    assert resolved.generation.precision == resolved.battery.precision == ("bf16" if native else "fp32")
    assert resolved.generation.max_new_tokens == auto.generation.max_new_tokens and auto.battery.precision == "auto"
    fixed = machine_precision(QASuiteConfig(benchmarks={"synthetic": {"pipeline": "x"}},
                                            generation={"precision": "bf16"}, battery=None), "cpu")
    assert fixed.generation.precision == "bf16" and fixed.battery is None  # a named precision is kept


@pytest.mark.parametrize("path", MEMORY_RUNS, ids=lambda p: p.name)
def test_every_memory_run_preset_of_the_suite_loads(path):
    from mlpmem.pipeline.config import PipelineConfig

    assert PipelineConfig.from_yaml(path).run_dir


def test_method_files_and_the_inputs_each_method_needs(tmp_path, tiny_llama, tiny_tokenizer):
    from mlpmem.baselines.methods import build_method
    from mlpmem.errors import ConfigError
    from studies.qa.runner import method_file

    assert method_file(tmp_path, "backbone") == tmp_path / "methods" / "backbone.json"
    assert method_file(tmp_path, "memory") == tmp_path / "methods" / "memory.json"
    assert build_method("backbone", None, (tiny_llama, tiny_tokenizer)).model is tiny_llama
    with pytest.raises(ConfigError, match="run folder"):
        build_method("memory", None, (tiny_llama, tiny_tokenizer))
    with pytest.raises(ConfigError, match="documents"):
        build_method("cpt", None, (tiny_llama, tiny_tokenizer))


def test_a_method_file_scored_under_other_settings_is_scored_again(tmp_path):
    from studies.qa.runner import changed_settings, method_settings

    suite = {"benchmarks": {"synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml"},
                            "disfl_qa": {"pipeline": "studies/qa/configs/qa-disfl_qa.yaml"}},
             "lambda_grid": [0.0, 0.5], "gate_offset_grid": [0.0, 3.0],
             "no_regression": {"memory_from": "synthetic", "methods": ["backbone", "memory"]}}
    cfg = QASuiteConfig(**suite)
    wider = QASuiteConfig(**{**suite, "lambda_grid": [0.0, 0.5, 0.8], "gate_offset_grid": [0.0, 3.0, 6.0]})
    for method, changed in {"memory": ["lambda_grid"], "knnlm": ["lambda_grid"], "memory-gate": ["gate"],
                            "backbone": [], "cpt": [], "rag-dense": []}.items():
        stored = {"test": {}, "settings": method_settings(cfg, "synthetic", method)}
        assert changed_settings(stored, method_settings(wider, "synthetic", method)) == changed, method
        assert changed_settings(stored, method_settings(cfg, "synthetic", method)) == []
    # the decoding precision is a change of every method's file
    low = QASuiteConfig(**{**suite, "generation": {"precision": "bf16"}})
    assert changed_settings({"test": {}, "settings": method_settings(cfg, "synthetic", "cpt")},
                            method_settings(low, "synthetic", "cpt")) == ["generation"]
    # each gate setting (offset rule, floor grid, ...) rescores memory-gate alone
    for change in ({"gate_offset_rule": "one_se"}, {"gate_floor_grid": [0.0, 0.2]}, {"gate_training": "questions"}):
        other = QASuiteConfig(**{**suite, **change})
        for method, changed in {"memory-gate": ["gate"], "memory": [], "knnlm": []}.items():
            assert changed_settings({"test": {}, "settings": method_settings(cfg, "synthetic", method)},
                                    method_settings(other, "synthetic", method)) == changed, (change, method)
    for bad in ([], [1.0], [-0.1]):
        with pytest.raises(MlpmemError, match="gate_floor_grid"):
            QASuiteConfig(**{**suite, "gate_floor_grid": bad})
    with pytest.raises(MlpmemError, match="gate_offset_rule"):
        QASuiteConfig(**{**suite, "gate_offset_rule": "widest"})
    # the no-regression checks only where they run; a file that records no settings is scored again
    assert "no_regression" in method_settings(cfg, "synthetic", "memory")
    assert "no_regression" not in method_settings(cfg, "disfl_qa", "memory")
    assert "no_regression" not in method_settings(cfg, "synthetic", "knnlm")
    assert changed_settings({"test": {}}, method_settings(wider, "synthetic", "memory")) == sorted(
        method_settings(wider, "synthetic", "memory"))
    fewer = QASuiteConfig(**{**suite, "benchmarks": {**suite["benchmarks"],
                                                     "synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml",
                                                                   "test_questions": 10}}})
    stored = {"settings": method_settings(cfg, "synthetic", "backbone")}
    assert changed_settings(stored, method_settings(fewer, "synthetic", "backbone")) == ["benchmark"]
    tune = QASuiteConfig(**{**suite, "benchmarks": {**suite["benchmarks"],
                                                    "synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml",
                                                                  "tune_questions": 100}}})
    assert changed_settings(stored, method_settings(tune, "synthetic", "backbone")) == []  # it tunes nothing
    for method in ("memory", "knnlm", "memory-gate"):
        stored = {"settings": method_settings(cfg, "synthetic", method)}
        assert changed_settings(stored, method_settings(tune, "synthetic", method)) == ["benchmark"]
    # the memory's checksum is a setting of the methods that read the memory, and only of those
    for method, changed in {"memory": ["memory"], "memory-gate": ["memory"], "knnlm": [], "lora": []}.items():
        stored = {"settings": method_settings(cfg, "synthetic", method, "aaa")}
        assert changed_settings(stored, method_settings(cfg, "synthetic", method, "bbb")) == changed, method


def test_a_benchmarks_pipeline_set_overrides_its_memory_recipe(tmp_path):
    """``benchmarks.NAME.pipeline_set`` reaches the benchmark's memory run, after the suite's own settings."""
    from mlpmem.errors import ConfigError
    from studies.qa.runner import Context

    bench = {"pipeline": "studies/qa/configs/qa-synthetic.yaml", "options": {"num_entities": 8, "seed": 0},
             "tune_questions": 2, "test_questions": 2, "pipeline_set": ["train.alpha=0.3", "memory.preset=base"]}
    cfg = QASuiteConfig(out_dir=str(tmp_path), benchmarks={"synthetic": bench})
    run = Context(cfg, "synthetic", (None, None), progress=False).run
    assert (run.cfg.train.alpha, run.cfg.memory.preset) == (0.3, "base")
    assert run.dir == tmp_path / "synthetic" / "memory-run"
    bad = QASuiteConfig(out_dir=str(tmp_path), benchmarks={"synthetic": {**bench, "pipeline_set": ["train.alpha=2"]}})
    with pytest.raises(ConfigError, match="alpha"):
        Context(bad, "synthetic", (None, None), progress=False)
