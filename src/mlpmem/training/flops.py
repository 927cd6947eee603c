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


def matmul_peak(dtype: torch.dtype = torch.bfloat16, size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a (size x size) @ (size x size) ``torch.mm`` in ``dtype``: the best of ``repeats`` after a
    warm-up (the machine's attainable rate, not its average under load)."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best
