"""What fraction of the machine training uses (``bench offline``): matmul FLOPs per trained token against a measured
matmul peak.

FLOPs of one training step (forward + backward, per token) are counted by ``FlopCounterMode`` on the autograd
path of the loss (the fused path runs the same matmuls in chunks). The peak is a plain square ``torch.mm``
in bf16 on the same threads, best of a few repeats: ``tokens/s x FLOPs/token / peak`` is the fraction.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from mlpmem.compute import sync_device
from mlpmem.memory.model import MLPMemory
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import TrainData
from mlpmem.training.loop import batch_loss


def train_flops_per_token(memory: MLPMemory, data: TrainData, cfg: TrainConfig) -> float:
    """Matmul FLOPs of one training step (forward + backward) per token, on the first batch of ``data``."""
    n = min(cfg.batch_size, len(data.targets))
    device = memory.head.weight.device  # a tied head is the backbone's: the memory runs beside it
    batch = {k: v.to(device) for k, v in data.batch(np.arange(n)).items()}
    counter = FlopCounterMode(display=False)
    with counter:
        loss, _ = batch_loss(memory, memory, batch, cfg, fused=False)
        loss.backward()
    memory.zero_grad(set_to_none=True)
    return counter.get_total_flops() / n


def synced_mm(a: torch.Tensor, b: torch.Tensor) -> None:
    """``a @ b``, returning once the device has computed it (a GPU queues kernels and returns at once)."""
    torch.mm(a, b)
    sync_device(a.device)


def _timed_mm(a: torch.Tensor, b: torch.Tensor) -> float:
    sync_device(a.device)
    t0 = time.perf_counter()
    synced_mm(a, b)
    return time.perf_counter() - t0


def random_square(size: int, dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random ``(size, size)`` operands of a timed product."""
    return torch.randn(size, size, dtype=dtype, device=device), torch.randn(size, size, dtype=dtype, device=device)


def peak_max_size(device: torch.device | str, cpu_max: int = 2048) -> int:
    """The largest square product to time on ``device``: ``cpu_max`` on a CPU, at least 8192 on a GPU (whose smaller
    products only measure the kernel launch)."""
    return max(cpu_max, 8192) if torch.device(device).type == "cuda" else cpu_max


def peak_size(dtype: torch.dtype, max_size: int = 2048, min_seconds: float = 0.02, device="cpu") -> int:
    """The square size at which to time ``torch.mm`` in ``dtype`` on ``device``: doubled from 256 (or ``max_size``
    if smaller) until one product takes ``min_seconds`` or the size reaches ``max_size``. A dtype the hardware only
    emulates (bf16 on an AVX2 CPU, ~50x slower than fp32) then costs a fraction of a second instead of minutes."""
    size = min(256, max_size)
    while size < max_size:
        if _timed_mm(*random_square(size, dtype, device)) >= min_seconds:
            break
        size = min(2 * size, max_size)
    return size
