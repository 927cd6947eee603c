"""A stage resumed after an interruption times only what it built itself: its recorded speed is that of the rows it
encoded or searched, never all the rows over the last session's seconds."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.runs import TINY, copy_run, corpus_of
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.reporting.run_report import summary_row

TICK = 5.0  # seconds of the fake clock between two readings


def interrupt(folder: Path, keep: int) -> tuple[int, int]:
    """Leave the sharded build in ``folder`` as a kill after its first ``keep`` shards leaves it; returns the rows
    kept and the rows dropped."""
    manifest = json.loads((folder / "manifest.json").read_text())
    kept, dropped = manifest["shards"][:keep], manifest["shards"][keep:]
    assert kept and dropped
    for shard in dropped:
        for entry in shard["files"].values():
            (folder / entry["name"]).unlink()
    rows = sum(s["rows"] for s in kept)
    manifest.update(shards=kept, rows=rows, complete=False)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return rows, sum(s["rows"] for s in dropped)


@pytest.fixture()
def run(tiny_run, tiny_backbone_dir, tmp_path, monkeypatch) -> Run:
    folder = copy_run(tiny_run, tmp_path / "run")
    sets = [f"backbone.name={tiny_backbone_dir}", f"corpus.path={corpus_of(tiny_run)}", f"run_dir={folder}"]
    clock = itertools.count(step=TICK)
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(clock)))
    return Run(PipelineConfig.from_yaml(TINY, sets), progress=False)


def timing(run: Run, stage: str) -> dict:
    return json.loads(run.layout.timings.read_text())[stage]


def test_a_resumed_key_extraction_times_only_the_rows_it_encoded(run):
    kept, dropped = interrupt(run.layout.keystore("train"), keep=2)
    stage_datastore(run)
    recorded = timing(run, "keys_train")
    assert recorded["tokens"] == dropped and recorded["resumed_after"] == kept
    assert recorded["tokens_per_s"] == pytest.approx(dropped / recorded["seconds"])


def test_a_resumed_teacher_times_only_the_rows_it_searched(run):
    kept, dropped = interrupt(run.layout.teacher, keep=3)
    stage_teacher(run)
    recorded = timing(run, "teacher")
    assert recorded["tokens"] == dropped and recorded["resumed_after"] == kept
    # reports give the time for every row at the measured rate
    row = summary_row(run.dir)
    assert row["teacher_seconds"] == pytest.approx(recorded["seconds"] * (kept + dropped) / dropped)


def test_an_uninterrupted_rebuild_times_every_row(run):
    rows = json.loads((run.layout.teacher / "manifest.json").read_text())["rows"]
    stage_teacher(run, rebuild=True)
    recorded = timing(run, "teacher")
    assert recorded["tokens"] == rows and "resumed_after" not in recorded
