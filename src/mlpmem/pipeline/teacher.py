"""Stage 4, the teacher: sparse top-K kNN targets for every datastore position."""

from __future__ import annotations

import dataclasses
import time

from mlpmem.pipeline.run import Run
from mlpmem.teacher import build_teacher
from mlpmem.utils.distributed import shards_before
from mlpmem.utils.shards import read_json


def teacher_config(run: Run):
    """The teacher configuration, with T taken from the kNN-LM sweep when so configured."""
    cfg = run.cfg.teacher
    results = run.layout.knnlm_results
    if run.cfg.teacher_temperature_from_knnlm and results.exists():
        cfg = dataclasses.replace(cfg, temperature=read_json(results, "knnlm results")["chosen"]["temperature"])
    return cfg


def stage_teacher(run: Run, rebuild: bool = False) -> dict:
    before = sum(s["rows"] for s in shards_before(run.layout.teacher, rebuild))
    t0 = time.perf_counter()
    manifest = build_teacher(run.layout.datastore, run.layout.teacher, teacher_config(run), rebuild=rebuild,
                             progress=run.progress)
    seconds = time.perf_counter() - t0
    run.record_build("teacher", manifest["rows"], before, seconds, bytes_per_token=manifest["bytes_per_token"])
    return manifest
