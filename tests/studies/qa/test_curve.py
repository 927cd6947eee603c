"""The QA memory's learning curve (``python -m studies qa curve``) on a tiny backbone and benchmark."""

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from mlpmem.config import read_yaml
from mlpmem.errors import ConfigError
from studies.cli import main
from studies.qa.curve import CurveConfig, stopping_rules


@pytest.fixture()
def curve_suite(tmp_path, tiny_backbone_dir):
    tiny = read_yaml("tiny")
    tiny["backbone"]["name"] = str(tiny_backbone_dir)
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump(tiny))
    suite = {"out_dir": str(tmp_path / "qa"), "docs_dir": str(tmp_path / "docs"), "backbone": str(tiny_backbone_dir),
             "benchmarks": {"synthetic": {"pipeline": str(tmp_path / "memory.yaml"),
                                          "options": {"num_entities": 12, "seed": 0}, "tune_questions": 4,
                                          "test_questions": 6}},
             "shots": 1, "generation": {"max_new_tokens": 3, "batch_size": 4}, "battery": None, "ablations": None}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return tmp_path


def test_curve_scores_every_epoch_and_resumes(curve_suite):
    argv = ["qa", "curve", str(curve_suite / "suite.yaml"), "--epochs", "2", "--lambdas", "0.5", "--quiet",
            "--docs", str(curve_suite / "report")]
    assert main(argv) == 0
    results = json.loads((curve_suite / "report" / "results.json").read_text())
    assert [row["epoch"] for row in results["epochs"]] == [1, 2]
    for row in results["epochs"]:
        assert [r["lambda"] for r in row["questions"]] == [0.5] and 0 <= row["questions"][0]["f1"] <= 100
        assert row["validation"]["joint_ppl"] > 1
    assert results["questions"] == 4 and results["backbone"]["questions"][0]["lambda"] == 0.0
    assert set(results["rules"]) == {"last", "early stopping, patience 3", "lowest validation ppl",
                                     "highest validation F1"}
    assert (curve_suite / "report" / "curve.png").stat().st_size > 0
    assert "| stopping rule |" in (curve_suite / "report" / "report.md").read_text()

    curve = curve_suite / "qa" / "synthetic" / "curve"
    first = load_file(curve / "epoch-1" / "memory" / "model.safetensors")
    last = load_file(curve / "epoch-2" / "memory" / "model.safetensors")
    assert any(not torch.equal(first[k], last[k]) for k in first)  # the second epoch trained on
    stamp = (curve / "epoch-2" / "scores.json").stat().st_mtime_ns
    assert main(argv) == 0  # finished epochs are read back, not trained or scored again
    assert (curve / "epoch-2" / "scores.json").stat().st_mtime_ns == stamp


def test_curve_epochs_continue_one_training(curve_suite, tmp_path):
    """The curve's last epoch is the memory one uninterrupted training of as many epochs ends with."""
    from mlpmem.memory.model import MLPMemory
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.run import Run
    from mlpmem.pipeline.train import stage_train

    assert main(["qa", "curve", str(curve_suite / "suite.yaml"), "--epochs", "2", "--lambdas", "0.5",
                 "--quiet"]) == 0
    bench = curve_suite / "qa" / "synthetic"
    run = Run(PipelineConfig.from_yaml(bench / "memory-run" / "config.yaml", ["train.epochs=2"]), progress=False)
    stage_train(run, rebuild=True)
    whole = MLPMemory.from_pretrained(bench / "memory-run" / "memory").state_dict()
    paused = MLPMemory.from_pretrained(bench / "curve" / "epoch-2" / "memory").state_dict()
    for key in whole:
        torch.testing.assert_close(paused[key], whole[key], rtol=0, atol=1e-6)


def test_stopping_rules_pick_each_rule():
    def row(epoch, ppl, f1):
        return {"epoch": epoch, "validation": {"joint_ppl": ppl},
                "questions": [{"lambda": 0.2, "f1": f1, "f1_se": 1.0, "em": 0.0}]}

    rows = [row(1, 9.0, 5.0), row(2, 8.0, 7.0), row(3, 8.5, 6.0), row(4, 8.4, 6.5), row(5, 7.9, 8.0)]
    assert {k: v["epoch"] for k, v in stopping_rules(rows, patience=2).items()} == {
        "last": 5, "early stopping, patience 2": 2, "lowest validation ppl": 5, "highest validation F1": 5}
    assert stopping_rules(rows, patience=3)["early stopping, patience 3"]["epoch"] == 5


@pytest.mark.parametrize("bad", [{"epochs": 0}, {"lambdas": [0.0]}, {"lambdas": [1.5]}, {"lambdas": []}])
def test_curve_config_refuses(bad):
    with pytest.raises(ConfigError):
        CurveConfig(**bad)
