"""Mixing two next-token distributions after softmax, in log space.

p = (1 - lam) * p_a + lam * p_b  is computed as
log p = logaddexp(log(1 - lam) + log p_a, log(lam) + log p_b),
which never leaves log space (no underflow for rare tokens). lam = 0 returns log p_a
bit-for-bit and lam = 1 returns log p_b bit-for-bit.
"""

from __future__ import annotations

import math

import torch

from mlpmem.errors import ConfigError


def check_lambda(lam: float, name: str = "lambda") -> float:
    """Return `lam` as a float, or raise a one-line error if it is not a real number in [0, 1].

    A bool or a string (``True``, ``"0.3"``) is refused rather than converted: it is a caller's mistake.
    """
    is_bool = isinstance(lam, bool) or str(getattr(lam, "dtype", "")) in ("bool", "torch.bool")
    try:
        if is_bool or isinstance(lam, (str, bytes)) or not hasattr(lam, "__float__"):
            raise TypeError
        lam = float(lam)
    except (TypeError, ValueError, RuntimeError):  # also a tensor of several values
        raise ConfigError(f"{name} must be a real number in [0, 1], got {lam!r} ({type(lam).__name__})") from None
    if not (0.0 <= lam <= 1.0) or math.isnan(lam):
        raise ConfigError(f"{name} must be in [0, 1], got {lam}")
    return lam


def mix_log_probs(logp_a: torch.Tensor, logp_b: torch.Tensor, lam: float) -> torch.Tensor:
    """log((1 - lam) * exp(logp_a) + lam * exp(logp_b)), elementwise; exact at lam in {0, 1}."""
    lam = check_lambda(lam)
    if lam == 0.0:
        return logp_a
    if lam == 1.0:
        return logp_b
    return torch.logaddexp(logp_a + math.log1p(-lam), logp_b + math.log(lam))
