"""The whole pipeline's configuration: one section a stage (the presets: ``mlpmem/configs/*.yaml``).

Every default is the default preset's, ``mlpmem/configs/default.yaml`` (``tests/pipeline/test_config_defaults.py``
checks that ``PipelineConfig()`` equals it): a key or section left out of a YAML file is the default preset's. (One
exception: a ``teacher:`` section given in part starts from :class:`TeacherConfig`, the library's own defaults.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlpmem.backbone import BackboneConfig
from mlpmem.config import Config
from mlpmem.index import IndexConfig
from mlpmem.memory.config import MemoryConfig
from mlpmem.pipeline.corpus import CorpusConfig
from mlpmem.pipeline.datastore import DatastoreConfig
from mlpmem.pipeline.knnlm import KnnLMConfig
from mlpmem.teacher import TeacherConfig
from mlpmem.training.config import TrainConfig
from mlpmem.training.gate import GateTrainConfig


def default_teacher() -> TeacherConfig:
    """The default preset's teacher: an IVF-Flat index (the library's :class:`TeacherConfig` picks one itself)."""
    return TeacherConfig(query_batch=65536, index=IndexConfig(kind="ivf_flat", nprobe=64))


@dataclass
class PipelineConfig(Config):
    run_dir: str = "runs/default"
    seed: int = 0
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    datastore: DatastoreConfig = field(default_factory=DatastoreConfig)
    teacher: TeacherConfig = field(default_factory=default_teacher)
    teacher_temperature_from_knnlm: bool = True
    """Build the teacher with the kNN-LM temperature chosen on validation instead of ``teacher.temperature``."""
    knnlm: KnnLMConfig = field(default_factory=KnnLMConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    """What the memory is: depth, widths, blocks, head and initialisation."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """How the memory is optimised."""
    gate: GateTrainConfig = field(default_factory=GateTrainConfig)
    """The learned mixing gate λ_t of ``mlpmem gate`` (no other stage reads it)."""
