"""What fraction of the machine training uses: matmul FLOPs per trained token against a measured matmul peak.

FLOPs of one training step (forward + backward, per token) are counted by ``FlopCounterMode`` on the autograd
path of the loss (the fused path runs the same matmuls in chunks). The peak is a plain square ``torch.mm``
in bf16 on the same threads, best of a few repeats: ``tokens/s x FLOPs/token / peak`` is the fraction.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from mlpmem.memory.model import MLPMemory
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import TrainData
from mlpmem.training.loop import batch_loss


def train_flops_per_token(memory: MLPMemory, data: TrainData, cfg: TrainConfig) -> float:
    """Matmul FLOPs of one training step (forward + backward) per token, on the first batch of ``data``."""
    n = min(cfg.batch_size, len(data.targets))
    batch = data.batch(np.arange(n))
    counter = FlopCounterMode(display=False)
    with counter:
        loss, _ = batch_loss(memory, memory, batch, cfg, fused=False)
        loss.backward()
    memory.zero_grad(set_to_none=True)
    return counter.get_total_flops() / n


def peak_size(dtype: torch.dtype, max_size: int = 2048, min_seconds: float = 0.02) -> int:
    """The square size at which to time ``torch.mm`` in ``dtype``: doubled from 256 (or ``max_size`` if smaller)
    until one product takes ``min_seconds`` or the size reaches ``max_size``. A dtype the hardware only emulates
    (bf16 on an AVX2 CPU, ~50x slower than fp32) then costs a fraction of a second instead of minutes."""
    size = min(256, max_size)
    while size < max_size:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if time.perf_counter() - t0 >= min_seconds:
            break
        size = min(2 * size, max_size)
    return size


def matmul_peak(dtype: torch.dtype = torch.bfloat16, max_size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a square ``torch.mm`` in ``dtype`` (sized by :func:`peak_size`): the best of ``repeats`` after a
    warm-up (the machine's attainable rate, not its average under load)."""
    size = peak_size(dtype, max_size)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best
