"""The pipeline, stage by stage, inside one run folder (see :mod:`mlpmem.pipeline.run`).

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not.
"""

from __future__ import annotations

from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.evaluate import stage_eval
from mlpmem.pipeline.knnlm import stage_knnlm
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.pipeline.train import stage_train

STAGES = {"datastore": stage_datastore, "knnlm": stage_knnlm, "teacher": stage_teacher,
          "train": stage_train, "eval": stage_eval}
"""The stages in pipeline order (the corpus stage runs inside the datastore stage)."""


def run_pipeline(run: Run, rebuild: bool = False) -> dict:
    """corpus -> datastore -> kNN-LM -> teacher -> memory -> evaluation and report."""
    stage_datastore(run, rebuild)
    stage_knnlm(run)
    stage_teacher(run, rebuild)
    if not (run.layout.memory / "config.json").exists() or rebuild:
        stage_train(run, rebuild)
    return stage_eval(run)
