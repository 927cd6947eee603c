"""The pipeline, stage by stage, inside one run folder (see :mod:`mlpmem.pipeline.run`).

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not. :func:`run_stage` runs
one under the folder's lock, after checking that what it reads exists and that nothing it reuses was built
under other settings (:mod:`mlpmem.pipeline.records`), and records what it was built from.
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.layout import is_train_written
from mlpmem.pipeline import records
from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.evaluate import stage_eval
from mlpmem.pipeline.knnlm import stage_knnlm
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.pipeline.train import stage_train
from mlpmem.utils.shards import MANIFEST, read_json

STAGES = {"datastore": stage_datastore, "knnlm": stage_knnlm, "teacher": stage_teacher,
          "train": stage_train, "eval": stage_eval}
"""The stages in pipeline order (the corpus stage runs inside the datastore stage)."""
REBUILDS = ("datastore", "knnlm", "teacher", "train")
"""Stages that take ``rebuild`` (the evaluation always recomputes)."""


def _complete(folder: Path) -> bool:
    path = folder / MANIFEST
    return path.is_file() and bool(read_json(path, f"manifest of {folder}").get("complete"))


def built(run: Run, stage: str) -> bool:
    """Whether ``stage``'s artifacts are complete in the run folder."""
    layout = run.layout
    if stage == "datastore":
        return all(_complete(layout.keystore(s)) for s in ("train", "validation", "test"))
    if stage == "knnlm":
        return layout.knnlm_results.is_file()
    if stage == "teacher":
        return _complete(layout.teacher)
    if stage == "train":
        return (layout.memory / "config.json").is_file()
    return layout.results.is_file()


def needs(run: Run, stage: str) -> tuple[str, ...]:
    """The stages whose artifacts ``stage`` reads (the teacher reads the kNN-LM's temperature when so set)."""
    if stage == "teacher" and run.cfg.teacher_temperature_from_knnlm:
        return ("datastore", "knnlm")
    return {"datastore": (), "knnlm": ("datastore",), "teacher": ("datastore",), "train": ("datastore", "teacher"),
            "eval": ("datastore", "knnlm", "train")}[stage]


def require(run: Run, stages: tuple[str, ...]) -> None:
    """Refuse to go on unless every stage of ``stages`` has completed in the run folder."""
    config = run.config_file or "CONFIG"
    for stage in stages:
        if not built(run, stage):
            raise MlpmemError(f"{records.WHAT[stage]} of {run.dir} is missing or incomplete: run `mlpmem {stage} "
                              f"{config}` first (or `mlpmem run {config}`)")


def check_removable(train: Path) -> None:
    """Refuse to rebuild the training when ``train/`` holds files the training did not write (they would go
    with it)."""
    foreign = sorted(p.name for p in train.iterdir() if not is_train_written(p.name)) if train.is_dir() else []
    if foreign:
        raise MlpmemError(f"refusing to rebuild {train}: it holds {', '.join(foreign[:3])}, which mlpmem did not "
                          "write; move them out of it first")


def prepare(run: Run, stage: str, rebuild: bool = False) -> None:
    """Before ``stage`` runs: its inputs exist and are current and its own work is current (or rebuilt); then its
    old record is dropped (a kill in the stage leaves no record of work that is no longer there)."""
    require(run, needs(run, stage))
    records.check_upstream(run, stage)
    if stage in records.KEPT and not rebuild:
        records.check(run, stage)
    if stage == "train" and rebuild:
        check_removable(run.layout.train)
    if stage == "eval":
        records.verify_evaluation_inputs(run)
    records.forget(run, stage)


def run_stage(run: Run, stage: str, rebuild: bool = False):
    """Run one stage under the folder's lock (:func:`prepare` first); once it completes, record it and write
    ``config.yaml``; return what the stage returns."""
    with run.locked():
        prepare(run, stage, rebuild)
        result = STAGES[stage](run, rebuild) if stage in REBUILDS else STAGES[stage](run)
        records.record(run, stage)
        run.write_config()
    return result


def run_pipeline(run: Run, rebuild: bool = False) -> dict:
    """corpus -> datastore -> kNN-LM -> teacher -> memory -> evaluation and report.

    Every recorded stage is checked against the configuration before any work starts; a memory whose record
    matches is reused, never retrained, and never one trained under other settings.
    """
    with run.locked():
        if rebuild:
            check_removable(run.layout.train)
        else:
            for stage in records.KEPT:
                records.check(run, stage)
            if built(run, "train") and records.is_current(run, "train"):
                records.verify_memory(run)  # the memory it will reuse, before any other work
        run_stage(run, "datastore", rebuild)
        run_stage(run, "knnlm", rebuild)
        run_stage(run, "teacher", rebuild)
        if rebuild or not (built(run, "train") and records.is_current(run, "train")):
            run_stage(run, "train", rebuild)
        return run_stage(run, "eval")
