"""The Memory Mosaics v2 experiment: both models, their shared data, training recipe and evaluation (YAML
presets inside the package, ``memory_mosaics/configs/``, named by their file name: ``small``, ``hour``, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from memory_mosaics.config import MosaicsConfig
from mlpmem.config import Config
from mlpmem.config import config_path as library_config_path
from mlpmem.config import presets as library_presets
from mlpmem.corpora.registry import CORPORA
from mlpmem.errors import ConfigError


@dataclass
class ModelSection(Config):
    """Widths shared by both models (the Transformer's SwiGLU width is matched in parameters)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 344
    short_window: int = 256
    long_gap_min: int = 64
    long_gap_max: int = 256
    long_gap_eval: int = 64

    def mosaics_config(self, vocab_size: int) -> MosaicsConfig:
        return MosaicsConfig(vocab_size=vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
                             num_attention_heads=self.num_heads, intermediate_size=self.intermediate_size,
                             short_window=self.short_window, long_gap_min=self.long_gap_min,
                             long_gap_max=self.long_gap_max, long_gap_eval=self.long_gap_eval)

    def validate(self) -> None:
        self.mosaics_config(2)  # validates


@dataclass
class TrainSection(Config):
    """The recipe both models share: AdamW, linear warmup, cosine (or linear) decay, clipping, seeded windows.

    The schedule fields are those of the memory's :class:`~mlpmem.training.config.TrainConfig`: both go through
    :func:`mlpmem.training.optim.lr_at`."""

    seq_len: int = 256
    batch_size: int = 16
    steps: int = 1000
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup_fraction: float = 0.05
    warmup_steps: int | None = None
    min_lr_fraction: float = 0.1
    schedule: Literal["cosine", "linear"] = "cosine"
    grad_clip: float = 1.0
    checkpoint_every: int = 100
    eval_every: int = 250
    """Steps between validation-loss measurements (and at the end)."""
    eval_windows: int = 16
    threads: int = 2

    def validate(self) -> None:
        if min(self.seq_len, self.batch_size, self.steps, self.checkpoint_every, self.eval_every,
               self.eval_windows, self.threads) < 1:
            raise ConfigError("mosaics train sizes, steps, intervals and threads must be >= 1")
        if not self.lr > 0 or self.grad_clip <= 0 or not 0 <= self.warmup_fraction < 1:
            raise ConfigError("mosaics train lr and grad_clip must be > 0 and warmup_fraction in [0, 1)")
        if not 0 <= self.min_lr_fraction <= 1 or self.weight_decay < 0:
            raise ConfigError("mosaics train min_lr_fraction must be in [0, 1] and weight_decay >= 0")


@dataclass
class EvalSection(Config):
    """The three questions."""

    ppl_windows: int = 64
    """Test windows (of the training length) for held-out perplexity; 0 = all."""
    cloze_items: int = 200
    cloze_choices: int = 4
    nk_documents: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    """Documents in the context (1 relevant + distractors) for the new-knowledge question."""
    nk_trials: int = 40
    icl_shots: list[int] = field(default_factory=lambda: [0, 1, 2, 4, 8])
    """Demonstrations per class for in-context learning."""
    icl_trials: int = 40
    icl_classes: int = 4
    batch_size: int = 8

    def validate(self) -> None:
        if min(self.cloze_choices, self.nk_trials, self.icl_trials, self.batch_size) < 1 or self.ppl_windows < 0:
            raise ConfigError("mosaics eval counts must be >= 1 (ppl_windows >= 0)")
        if self.cloze_choices < 2 or self.icl_classes < 2:
            raise ConfigError("mosaics eval needs >= 2 cloze choices and >= 2 ICL classes")
        if not self.nk_documents or min(self.nk_documents) < 1 or not self.icl_shots or min(self.icl_shots) < 0:
            raise ConfigError("mosaics eval nk_documents must be >= 1 and icl_shots >= 0")


@dataclass
class MosaicsExperiment(Config):
    out_dir: str = "runs/mosaics-small"
    corpus: str = "wikipedia-by-article"
    extra_train: list[str] = field(default_factory=list)
    """Other shipped corpora whose training split is added to the training text (and to the BPE tokenizer's
    training text); validation and test stay ``corpus``'s."""
    tokenizer: str = "bpe"
    """``bpe`` (trained on the training split) or ``smollm2`` (the shipped tokenizer)."""
    vocab_size: int = 4096
    """BPE vocabulary (ignored for smollm2)."""
    seed: int = 0
    model: ModelSection = field(default_factory=ModelSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)

    def validate(self) -> None:
        unknown = [name for name in [self.corpus, *self.extra_train] if name not in CORPORA]
        if unknown:
            raise ConfigError(f"unknown mosaics corpus {unknown[0]!r}: expected one of {', '.join(CORPORA)}")
        if self.tokenizer not in ("bpe", "smollm2"):
            raise ConfigError(f"mosaics tokenizer must be bpe or smollm2, got {self.tokenizer!r}")
        if self.vocab_size < 300:
            raise ConfigError(f"mosaics vocab_size must be >= 300 (bytes + merges), got {self.vocab_size}")



def presets() -> list[str]:
    """The names of the shipped presets (``small``, ``hour``, ...)."""
    return library_presets("memory_mosaics")


def config_path(config: str | Path) -> Path:
    """The YAML file a CONFIG argument names: a path, or a preset of this package (``small``)."""
    return library_config_path(config, "memory_mosaics")


def load_experiment(config: str | Path, overrides: list[str] | None = None) -> MosaicsExperiment:
    """The experiment of a CONFIG argument (a YAML path or a preset name) with ``key.sub=value`` overrides."""
    return MosaicsExperiment.from_yaml(config_path(config), overrides)
