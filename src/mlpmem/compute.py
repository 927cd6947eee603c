"""Where and at what precision a model computes: its device, bf16 or fp32, autocast and the inference scope.

``precision`` is ``fp32``, ``bf16`` or ``auto`` (bf16 only where the device computes it natively); ``device`` is
``auto`` (this process's GPU if any, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from pathlib import Path

import torch
from torch import nn

from mlpmem.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16")
"""Compute precision of backbone passes: fp32, bf16 autocast (weights stay fp32), or ``auto``: bf16 where the
hardware multiplies bf16 natively (a GPU with bf16, a CPU with AVX512-BF16 or AMX), fp32 elsewhere, since on an
AVX2-only CPU bf16 is emulated and several times slower than fp32. Keys are stored in fp16 either way."""
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (``/proc/cpuinfo`` flags; False where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(BF16_CPU_FLAGS & set(flags))


def resolve_precision(precision: str, device: torch.device | str = "cpu") -> str:
    """``fp32`` or ``bf16``: ``precision`` itself, or for ``auto`` bf16 only where ``device`` computes it natively."""
    if check_precision(precision) != "auto":
        return precision
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if device.type == "cpu" and cpu_has_native_bf16() else "fp32"


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device(device: str) -> str:
    if not isinstance(device, str) or not DEVICE_PATTERN.fullmatch(device):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
    return device


def compute_device(device: str = "auto") -> torch.device:
    """The device ``device`` names; ``auto``: this process's GPU (``LOCAL_RANK`` of a launcher) when CUDA has one,
    else the CPU. A GPU asked for on a machine without one is a one-line error."""
    if check_device(device) == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but torch sees no CUDA device here")
    return torch.device(device)


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s (first) parameters: inputs go there, outputs come back from there (the CPU for a
    model without parameters)."""
    param = next(iter(getattr(model, "parameters", tuple)()), None)
    return param.device if param is not None else torch.device("cpu")


def sync_device(device: torch.device) -> None:
    """Wait for ``device`` to finish its queued work (GPU kernels run asynchronously): timers read after it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synchronize(model: nn.Module) -> None:
    """:func:`sync_device` on ``model``'s device."""
    sync_device(model_device(model))


def autocast(model: nn.Module, precision: str = "fp32"):
    """A context running ``model`` at ``precision`` (bf16 through torch.autocast on its device; ``auto`` resolved
    for that device by :func:`resolve_precision`)."""
    device = model_device(model)
    if resolve_precision(precision, device) == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


@contextlib.contextmanager
def inference_scope(model: nn.Module, precision: str = "fp32", *more: nn.Module):
    """No grad and one :func:`autocast` held open around MANY inference calls of ``model`` (inner contexts nest).

    torch keeps the bf16 copy of each parameter it casts until the outermost autocast context exits, so inside
    this scope every weight is cast once, not once per call: what makes bf16 pay for many small calls (a context
    then its continuations on a KV cache). Only while the weights do not change. torch caches only the casts of
    parameters that require grad, so a frozen one (the tied output embedding, which a tied memory head shares: the
    largest matrix) would be cast at every call; under no_grad, marking it as requiring grad changes nothing else,
    and it is frozen again when the scope exits. ``more``: other modules run in the scope (a memory whose corpus
    head is a frozen copy of the embedding's rows), whose frozen weights are cached the same way."""
    params = {id(p): p for m in (model, *more) for p in m.parameters()}  # a shared weight once
    frozen = [p for p in params.values() if not p.requires_grad]
    with torch.no_grad(), autocast(model, precision):
        for p in frozen:
            p.requires_grad_(True)
        try:
            yield
        finally:
            for p in frozen:
                p.requires_grad_(False)
