"""``mlpmem run --reuse-from``: another run's datastore, kNN-LM lists and teacher taken where built alike."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

import mlpmem.utils.shards
from helpers.runs import TINY, copy_run
from mlpmem.cli import main
from mlpmem.errors import ConfigError
from mlpmem.layout import RunLayout


@pytest.fixture(scope="module")
def source(tmp_path_factory, tiny_run):
    """A copy of the session's tiny run (its timings are given a stage below)."""
    return copy_run(tiny_run, tmp_path_factory.mktemp("reuse") / "run")


def _run(source, folder, *sets, reuse=None):
    """``mlpmem run`` of the tiny config as ``source`` was built, in ``folder``, taking from ``reuse`` (``source``)."""
    config = yaml.safe_load((source / "config.yaml").read_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")
        args = ["run", TINY, "--quiet", "--reuse-from", str(reuse or source), "--set", f"run_dir={folder}",
                "--set", f"backbone.name={config['backbone']['name']}", "--set",
                f"corpus.path={config['corpus']['path']}"]
        for s in sets:
            args += ["--set", s]
        return main(args)


def test_a_new_recipe_takes_the_datastore_and_teacher_and_trains_its_own_memory(source, tmp_path, capsys):
    timings = RunLayout(source).timings  # a stage under a second records no timing: give the source one
    recorded = json.loads(timings.read_text()) if timings.exists() else {}
    timings.write_text(json.dumps({**recorded, "keys_train": {"tokens": 10, "seconds": 2.0, "tokens_per_s": 5.0}}))
    assert _run(source, tmp_path / "longer", "train.epochs=3") == 0
    assert f"taken from {source}: datastore, knnlm, teacher\n" in capsys.readouterr().out
    new, old = RunLayout(tmp_path / "longer"), RunLayout(source)
    for rel in ("datastore/manifest.json", "teacher/manifest.json"):
        assert os.path.samefile(new.root / rel, old.root / rel)  # hard links, not recomputed
    assert not os.path.samefile(new.memory / "model.safetensors", old.memory / "model.safetensors")
    timings = json.loads(new.timings.read_text())
    assert timings["keys_train"]["reused_from"] == str(source) and "reused_from" not in timings.get("train", {})
    for stage in ("datastore", "knnlm", "teacher"):
        assert json.loads(new.record(stage).read_text()) == json.loads(old.record(stage).read_text())
    assert json.loads(new.record("train").read_text())["built_from"]["train.epochs"] == 3
    assert f"taken from `{source}` (`mlpmem run --reuse-from`)" in (new.root / "report.md").read_text()
    # the source is untouched: its memory and its records are what they were
    assert json.loads(old.record("train").read_text())["built_from"]["train.epochs"] == 2


def test_only_stages_built_from_the_same_settings_are_taken(source, tmp_path, capsys):
    assert _run(source, tmp_path / "other-teacher", "teacher.k=4") == 0
    out = capsys.readouterr().out
    assert "taken from" in out and "datastore, knnlm\n" in out
    new = RunLayout(tmp_path / "other-teacher")
    assert os.path.samefile(new.datastore / "manifest.json", RunLayout(source).datastore / "manifest.json")
    assert not os.path.samefile(new.teacher / "manifest.json", RunLayout(source).teacher / "manifest.json")
    assert json.loads(new.record("teacher").read_text())["built_from"]["teacher.k"] == 4
    assert _run(source, tmp_path / "other-keys", "corpus.block_size=24") == 0
    assert "taken from" in capsys.readouterr().out and not (tmp_path / "other-keys" / "knnlm").is_symlink()
    assert not os.path.samefile(RunLayout(tmp_path / "other-keys").datastore / "manifest.json",
                                RunLayout(source).datastore / "manifest.json")


def test_bad_sources_are_one_line_errors(source, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert _run(source, tmp_path / "new", reuse=tmp_path / "empty") == ConfigError.exit_code
    assert "not a run folder with a finished datastore" in capsys.readouterr().err
    assert _run(source, source) == ConfigError.exit_code
    assert "this run's own folder" in capsys.readouterr().err


def test_the_converged_preset_can_take_the_scaling_series_stages():
    """The converged preset builds its datastore, kNN-LM lists and teacher from exactly the settings of the
    largest run of the all-plays scaling series its comments name, so ``--reuse-from`` takes them."""
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.records import OWN
    from studies.data_scaling import size_config

    converged = PipelineConfig.from_yaml("converged").to_dict()
    largest = size_config(PipelineConfig.from_yaml("default", ["corpus.options.n_train=35"]), 0,
                          Path("runs/data-scaling-35")).to_dict()
    for section in (*OWN["datastore"], *OWN["knnlm"], *OWN["teacher"]):
        assert converged[section] == largest[section], section
    assert converged["train"] != largest["train"]
