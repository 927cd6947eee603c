"""The whole pipeline's configuration: one section a stage (``configs/*.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlpmem.backbone import BackboneConfig
from mlpmem.config import Config
from mlpmem.pipeline.corpus import CorpusConfig
from mlpmem.pipeline.datastore import DatastoreConfig
from mlpmem.pipeline.knnlm import KnnLMConfig
from mlpmem.teacher import TeacherConfig
from mlpmem.training.loop import TrainConfig


@dataclass
class PipelineConfig(Config):
    run_dir: str = "runs/default"
    seed: int = 0
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    datastore: DatastoreConfig = field(default_factory=DatastoreConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    teacher_temperature_from_knnlm: bool = True
    """Build the teacher with the kNN-LM temperature chosen on validation instead of ``teacher.temperature``."""
    knnlm: KnnLMConfig = field(default_factory=KnnLMConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
