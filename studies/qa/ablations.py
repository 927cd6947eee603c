"""The ablation studies of the QA report, on their own pipeline run (``ablations.pipeline``)."""

from __future__ import annotations

from pathlib import Path

from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.knnlm import stage_knnlm
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.utils.shards import read_json
from studies.ablation import run_study
from studies.qa.config import AblationSuiteConfig, QASuiteConfig
from studies.variant_runs import config_record


def run_ablations(cfg: QASuiteConfig, backbone, progress: bool = True, train: bool = True) -> dict:
    """The ablation studies on their own pipeline run; with ``train=False`` only the finished ones are collected."""
    abl = cfg.ablations or AblationSuiteConfig()
    pcfg = PipelineConfig.from_yaml(abl.pipeline)
    out = {}
    for study in abl.studies:
        path = Path(pcfg.run_dir) / "ablations" / study / "results.json"
        if path.exists():
            done = read_json(path, study)
            if done.get("config") == config_record(pcfg):  # a study of another configuration is redone
                out[study] = done["rows"]
    if train and cfg.ablations is not None and set(out) != set(abl.studies):
        run = Run(pcfg, progress, backbone=backbone)
        stage_datastore(run)
        stage_knnlm(run)
        stage_teacher(run)
        for study in abl.studies:
            if study not in out:
                out[study] = run_study(run, study, progress)
    return {"run_dir": pcfg.run_dir, "studies": out} if out else {}
