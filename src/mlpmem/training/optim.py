"""The optimiser of the memory: AdamW, linear warmup then cosine or linear decay, gradient clipping (also when
sharded)."""

from __future__ import annotations

import math

import torch
from torch.distributed.tensor import DTensor

from mlpmem.training.config import TrainConfig


def adamw(memory: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters: weight decay on matrices, none on vectors (norms, biases)."""
    trainable = [p for p in memory.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.ndim >= 2]
    no_decay = [p for p in trainable if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def lr_schedule(optimizer, total: int, cfg: TrainConfig, step: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The :func:`lr_at` schedule over ``total`` steps, positioned after ``step`` steps (0 for a new run)."""
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.lr
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, total, cfg), last_epoch=step - 1)


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warmup (``warmup_steps``, else ``warmup_fraction`` of ``total``), then cosine or linear decay to
    ``min_lr_fraction`` of the peak at the last step (a multiplier of lr)."""
    warm = max(1, int(cfg.warmup_fraction * total) if cfg.warmup_steps is None else cfg.warmup_steps)
    if step < warm:
        return (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    shape = 1 - progress if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.min_lr_fraction + (1 - cfg.min_lr_fraction) * shape


def optimizer_step(accelerator, optimizer, scheduler, params, grad_clip: float, sharded: bool = False) -> None:
    """Clip the gradients of ``params`` (FSDP-``sharded``: on the global norm over all shards), step the optimizer
    and the schedule, clear the gradients."""
    if sharded:
        clip_sharded(list(params), grad_clip)
    else:
        accelerator.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def clip_sharded(params: list, max_norm: float) -> torch.Tensor:
    """Clip FSDP-sharded gradients to the global norm over all shards of all processes (collective)."""
    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if isinstance(norm, DTensor):  # a norm still partial over the shards is reduced here
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm
