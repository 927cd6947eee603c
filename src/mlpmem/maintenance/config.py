"""The ``maintenance`` configuration: how ``mlpmem update``, ``forget`` and ``explain`` change or read a run.

It lives apart from the pipeline's configuration (:class:`mlpmem.pipeline.config.PipelineConfig` is what built the
run and stays as it was; the maintenance package reads the pipeline, so the pipeline cannot hold this section
without an import cycle). It is read through the project's one loader (:class:`mlpmem.config.Config`): a YAML file
(the CLI's default: the preset ``mlpmem/configs/maintenance.yaml``) and/or dotted ``--set`` overrides such as
``update.replay_ratio=2``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mlpmem.config import Config, apply_override, check_overrides, from_dict, read_yaml
from mlpmem.errors import ConfigError


@dataclass
class TuneConfig(Config):
    """How the memory is fine-tuned after an operation (the run's ``train:`` section gives everything else:
    precision, weight decay, schedule, fused loss)."""

    replay_ratio: float = 1.0
    """Old positions replayed per changed position (new or forgotten), sampled uniformly without replacement,
    so that the memory keeps what it knew; 0: no replay."""
    replay_draw: Literal["once", "epoch"] = "once"
    """``once``: one replay sample, visited every epoch; ``epoch``: every epoch draws its own ``replay_ratio`` old
    positions per changed one, walking through a sample of ``replay_ratio x epochs`` per changed position (all
    the old positions if fewer), so that the epochs together rehearse as much of the old data as they can at the
    same cost per epoch."""
    epochs: int = 2
    """Passes over the changed positions plus their replay sample."""
    lr: float = 3e-4
    """Peak learning rate (a fraction of a from-scratch training's: the memory is already trained)."""
    batch_size: int | None = None
    """Rows per step; None: the run's ``train.batch_size``."""
    warmup_fraction: float = 0.05

    def validate(self) -> None:
        if not 0.0 <= self.replay_ratio <= 1000.0:
            raise ConfigError(f"{self._where('replay_ratio')} must be in [0, 1000], got {self.replay_ratio}")
        if self.epochs < 1:
            raise ConfigError(f"{self._where('epochs')} must be >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ConfigError(f"{self._where('lr')} must be > 0, got {self.lr}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"{self._where('batch_size')} must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"{self._where('warmup_fraction')} must be in [0, 1), got {self.warmup_fraction}")


@dataclass
class UpdateConfig(TuneConfig):
    """``mlpmem update``: new documents join the run."""

    replay_targets: Literal["teacher", "memory"] = "teacher"
    """What a replayed old position is taught: ``teacher``, its teacher row at the run's α (as in the first
    training); ``memory``, the memory's own distribution before the update (top-K, no cross-entropy): the memory
    is held to what it predicted there while it learns the new positions (learning without forgetting)."""
    refresh: bool = False
    """Also recompute the teacher of the old positions against the grown datastore (their neighbours may now
    include new documents): a search of every old position, as costly as the teacher stage. Off: old positions
    keep the targets they were trained on, and a forget of the same documents returns the teacher's files
    exactly (with it on, their contents return but under new file names)."""


@dataclass
class ForgetConfig(TuneConfig):
    """``mlpmem forget``: documents leave the run."""

    target: Literal["backbone", "teacher"] = "backbone"
    """What the memory is taught on the forgotten positions: ``backbone`` (the backbone's own next-token
    distribution, top-K, as if the memory added nothing there) or ``teacher`` (the kNN distribution of the
    datastore without the forgotten documents). Either way with no cross-entropy on the forgotten token."""
    refresh: Literal["affected", "none"] = "affected"
    """``affected``: recompute the teacher of every remaining position whose targets were computed while a
    forgotten document was in the datastore (so that no target keeps a forgotten document's next tokens);
    ``none``: only drop the forgotten positions."""


@dataclass
class ExplainConfig(Config):
    """``mlpmem explain``: which training documents support each prediction."""

    documents: int = 3
    """Documents listed per token (the best supported first)."""
    snippet_chars: int = 120
    """Characters of each document shown."""
    k: int | None = None
    """Neighbours searched per position; None: the teacher's k."""
    lam: float | None = None
    """Memory weight when tokens are generated; None: the λ the run chose on validation (0.5 if it has none)."""

    def validate(self) -> None:
        if self.documents < 1 or self.snippet_chars < 10:
            raise ConfigError("explain documents must be >= 1 and snippet_chars >= 10")
        if self.k is not None and self.k < 1:
            raise ConfigError(f"explain k must be >= 1, got {self.k}")
        if self.lam is not None and not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"explain lam must be in [0, 1], got {self.lam}")


@dataclass
class MaintenanceConfig(Config):
    update: UpdateConfig = field(default_factory=UpdateConfig)
    forget: ForgetConfig = field(default_factory=ForgetConfig)
    explain: ExplainConfig = field(default_factory=ExplainConfig)
    seed: int = 0
    """Seed of the replay samples (each operation also mixes in its sequence number), and added to the run's
    ``train.seed`` for the fine-tuning (its order, replay shares and dropout): 0 keeps the run's."""


def load_maintenance_config(path: str | Path | None = None, overrides: list[str] | None = None) -> MaintenanceConfig:
    """The defaults, or ``path`` (YAML), with dotted ``key.sub=value`` overrides applied."""
    check_overrides(overrides or [])
    raw = read_yaml(path) if path is not None else {}
    for item in overrides or []:
        apply_override(raw, item)
    return from_dict(MaintenanceConfig, raw)
