"""scale-data: nested training caps, one run each, one report (on the tiny preset)."""

from __future__ import annotations

import json

import pytest

from helpers.corpus import write_corpus
from mlpmem.errors import ConfigError
from mlpmem.layout import RunLayout
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.reuse import encoded_rows
from mlpmem.utils.shards import read_json
from studies.data_scaling import DataScalingConfig, run_scaling, size_config


def test_size_config_caps_only_the_training_split(tmp_path):
    base = PipelineConfig.from_yaml("quick")
    capped = size_config(base, 1000, tmp_path)
    assert capped.corpus.max_tokens == {**base.corpus.max_tokens, "train": 1000}
    assert capped.run_dir == str(tmp_path / "runs" / "train-1000")
    whole = size_config(base, 0, tmp_path)
    assert "train" not in whole.corpus.max_tokens and whole.run_dir.endswith("train-all")
    with pytest.raises(ConfigError, match="train_tokens"):
        DataScalingConfig(train_tokens=[1])


def test_two_sizes_end_to_end(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "corpus", 16)
    overrides = [f"backbone.name={tiny_backbone_dir}", f"corpus.path={corpus}", "train.epochs=1"]
    cfg = DataScalingConfig(train_tokens=[0, 300], out_dir=str(tmp_path / "scaling"))
    results = run_scaling("tiny", cfg, overrides, progress=False)
    sizes = [r["train_tokens"] for r in results["sizes"]]
    assert len(sizes) == 2 and sizes[0] < sizes[1]  # the capped run first, then the whole split
    assert sizes[0] <= 300
    saved = json.loads((tmp_path / "scaling" / "results.json").read_text())
    assert saved["sizes"][1]["joint_over_backbone"] == results["sizes"][1]["joint_over_backbone"]
    assert (tmp_path / "scaling" / "data_scaling.png").stat().st_size > 1000
    text = (tmp_path / "scaling" / "report.md").read_text()
    assert "training tokens" in text and "memory alone / backbone (covered)" in text and "--train-tokens" in text
    assert "training tokens/s" in text
    # the whole split ran first; the capped run took its evaluation keys whole and its first training shards
    small, whole = (RunLayout(tmp_path / "scaling" / "runs" / name) for name in ("train-300", "train-all"))
    for split in ("validation", "test"):
        manifest = read_json(small.keystore(split) / "manifest.json", split)
        assert encoded_rows(manifest) == 0 and manifest["rows"] == read_json(
            whole.keystore(split) / "manifest.json", split)["rows"]
    train = read_json(small.keystore("train") / "manifest.json", "train")
    assert 0 < encoded_rows(train) < train["rows"]
    path = tmp_path / "scaling" / "runs" / "train-300" / "timings.json"
    timings = json.loads(path.read_text()) if path.exists() else {}
    assert "keys_validation" not in timings and "keys_test" not in timings  # nothing was measured there
    for row in results["sizes"]:  # memory alone against the backbone on the positions its head covers
        test = row["test_ppl"]
        assert row["memory_over_backbone_covered"] == test["memory"] / test["backbone_covered"]
