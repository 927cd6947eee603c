"""The ``train:`` section: how the memory is optimised (loss weight, schedule, batches, precision, sharding).

What the memory *is* (its depth, width, head and initialisation) is the pipeline's ``memory:`` section
(:class:`mlpmem.memory.config.MemoryConfig`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.freshness import settings
from mlpmem.inference.mixing import check_lambda
from mlpmem.training.loss import check_alpha

RUNTIME_KEYS = ("sharding",)
"""Train config keys that change how a run is executed, not what it computes: a checkpoint resumes under any."""


@dataclass
class TrainConfig(Config):
    alpha: float = 0.2
    """Weight of the KL to the kNN teacher; ``1 - alpha`` weighs the cross-entropy of the next token (the paper's
    best is about 0.4; 0.2 measured best on the quick and the default corpora, docs/results/default-ablations)."""
    epochs: int = 2
    batch_size: int = 512
    lr: float = 1e-3
    """Peak learning rate of AdamW (reached after the warmup)."""
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    warmup_steps: int | None = None
    """Steps of linear warmup; when set it overrides ``warmup_fraction``."""
    schedule: Literal["cosine", "linear"] = "cosine"
    """Decay after the warmup, down to ``min_lr_fraction`` of the peak: cosine, or linear (as in the paper)."""
    min_lr_fraction: float = 0.1
    grad_clip: float = 1.0
    loss_chunk: int | None = None
    """Rows per chunk of the head + loss computation (None: the implementation's default)."""
    fused_loss: bool = True
    """Head and loss as one chunked pass with closed-form gradients (:func:`mlpmem.training.loss.fused_head_loss`),
    its matmuls in ``precision``; False: the head under autocast, then the same chunked loss on the (B, V) logits
    (:func:`~mlpmem.training.loss.sparse_hybrid_loss`). The sharded (FSDP) path always uses the latter."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``bf16`` (autocast: bf16 matmuls in the forward, fp32 weights, loss and optimizer), ``fp32``, or ``auto``:
    bf16 only where the hardware computes it natively (:func:`mlpmem.compute.resolve_precision`)."""
    checkpoint_every: int = 200
    """Steps between checkpoints (and always at the end of an epoch)."""
    eval_lambdas: list[float] = field(default_factory=lambda: [round(0.05 * i, 2) for i in range(21)])
    eval_every: float | None = None
    """Also evaluate on validation every this fraction of an epoch (e.g. 0.25); None: at epoch ends only."""
    patience: int | None = None
    """Stop after this many evaluations in a row without a lower joint validation PPL; None: never stop early."""
    restore_best: bool | None = None
    """End with the weights of the best evaluation (lowest joint validation PPL, always kept in ``best/``).
    None: only when ``eval_every`` or ``patience`` is set, so that a plain run keeps its last weights."""
    seed: int = 0
    sharding: Literal["ddp", "fsdp"] = "ddp"
    """With N processes: ``ddp`` (every process holds the whole memory and its AdamW moments) or ``fsdp`` (they
    are sharded across processes, for memories too large for one device). Identical with 1 process."""

    def validate(self) -> None:
        check_alpha(self.alpha)
        for lam in self.eval_lambdas:
            check_lambda(lam, "train.eval_lambdas")
        if self.epochs < 1 or self.batch_size < 1 or self.checkpoint_every < 1:
            raise ConfigError("train epochs, batch_size and checkpoint_every must be >= 1")
        if not self.lr > 0 or self.grad_clip <= 0 or not 0 <= self.warmup_fraction < 1:
            raise ConfigError("train lr and grad_clip must be > 0 and warmup_fraction in [0, 1)")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ConfigError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.eval_every is not None and not self.eval_every > 0:
            raise ConfigError(f"train.eval_every must be a fraction of an epoch > 0, got {self.eval_every}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"train.patience must be >= 1 evaluations, got {self.patience}")

    def restores_best(self) -> bool:
        """Whether the run ends with its best evaluation's weights (see ``restore_best``)."""
        if self.restore_best is not None:
            return self.restore_best
        return self.eval_every is not None or self.patience is not None


def recipe(cfg: TrainConfig, memory_spec: dict | None) -> dict:
    """What a training is built from, as :mod:`mlpmem.freshness` settings: the train config without its
    :data:`RUNTIME_KEYS` (``train.*``) and the memory section ``memory_spec`` (``memory.*``). A checkpoint resumes,
    and a finished training counts as current, only under the same."""
    train = {k: v for k, v in asdict(cfg).items() if k not in RUNTIME_KEYS}
    return settings({"train": train, "memory": memory_spec})
