"""Variant runs: the folders a variant shares with its main run, its overrides and its folder name."""

from pathlib import Path

import pytest

from mlpmem.layout import RunLayout
from mlpmem.pipeline.config import PipelineConfig
from studies.variant_runs import SharedLayout, slug, with_overrides


def test_a_variant_reads_what_it_shares_from_the_main_run(tmp_path):
    main = RunLayout(tmp_path / "main")
    alone = SharedLayout(tmp_path / "v", main, set())
    assert alone.datastore == RunLayout(tmp_path / "v").datastore and alone.teacher == RunLayout(tmp_path / "v").teacher
    shared = SharedLayout(tmp_path / "v", main, {"datastore", "eval", "teacher"})
    assert shared.datastore == main.datastore and shared.teacher == main.teacher
    assert shared.keystore("train") == main.datastore and shared.keystore("validation") == main.keystore("validation")
    assert shared.train == RunLayout(tmp_path / "v").train  # what it trains is its own
    other = SharedLayout(tmp_path / "v", main, {"datastore", "teacher"}, teacher=tmp_path / "distilled")
    assert other.teacher == Path(tmp_path / "distilled")  # a teacher folder of its own choice wins


def test_overrides_and_folder_names():
    cfg = PipelineConfig.from_yaml("tiny")
    changed = with_overrides(cfg, {"train.alpha": 0.9, "memory.preset": "small", "train.seed": 3})
    assert (changed.train.alpha, changed.train.seed, changed.memory.preset) == (0.9, 3, "small")
    assert cfg.train.alpha != 0.9  # the main run's config is untouched
    with pytest.raises(TypeError):
        with_overrides(cfg, {"train.no_such_key": 1})
    assert slug("seeds' ensemble + kNN (0.5), alpha=0.2") == "seeds__ensemble___kNN__0.5___alpha=0.2"
