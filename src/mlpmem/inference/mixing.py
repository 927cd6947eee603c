"""Mixing two next-token distributions after softmax, in log space: :func:`mix`, the one mixing function.

    p = (1 - λ) p_lm + λ p_mem    is computed as    log p = logaddexp(log(1 - λ) + log p_lm, log λ + log p_mem),

which never leaves log space (no underflow for rare tokens). λ is one number, or a λ_t per position given by a
gate's logits z (λ_t = sigmoid(z)): then log λ_t = logsigmoid(z) and log(1 - λ_t) = logsigmoid(-z), both without
cancellation, and z = -inf (a closed gate) is λ_t = 0 exactly. A fixed λ = 0 returns the backbone's distribution
bit for bit and λ = 1 the memory's.

From logits (..., V) the normalisers are folded into the weights: with c_x = log(w_x) - logsumexp(x) (one value
per row) the mixture is logaddexp(lm + c_lm, mem + c_mem): one reduction per distribution, then one fused
elementwise pass, never the two intermediate log_softmax tensors. The result is fp32 log-probabilities (they
logsumexp to 0): argmax, softmax and temperature act on them as on logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

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


def mix(lm: torch.Tensor, mem: torch.Tensor, lam: float | torch.Tensor, logits: bool = True) -> torch.Tensor:
    """log((1 - λ) p_lm + λ p_mem) (module docstring).

    ``lm``, ``mem``: logits (..., V), normalised here (fp32 result); or, with ``logits=False``, log-probabilities
    of any shape (e.g. the targets' (n,)), mixed elementwise in their dtype. ``lam``: a number in [0, 1], or a
    gate's logits z as a tensor, one per position: (...,) against logits, broadcasting against log-probabilities.
    """
    if isinstance(lam, torch.Tensor):
        log_1m, log_lam = F.logsigmoid(-lam), F.logsigmoid(lam)  # (...,) each
        if logits:
            log_1m, log_lam = log_1m.float()[..., None], log_lam.float()[..., None]  # (..., 1)
    else:
        lam = check_lambda(lam, "lam")
        if lam in (0.0, 1.0):
            out = lm if lam == 0.0 else mem
            return F.log_softmax(out.float(), dim=-1) if logits else out
        log_1m, log_lam = math.log1p(-lam), math.log(lam)
    if not logits:
        return torch.logaddexp(lm + log_1m, mem + log_lam)
    lm, mem = lm.float(), mem.float()  # (..., V) each
    c_lm = log_1m - torch.logsumexp(lm, dim=-1, keepdim=True)  # (..., 1)
    c_mem = log_lam - torch.logsumexp(mem, dim=-1, keepdim=True)  # (..., 1)
    return torch.logaddexp(lm + c_lm, mem + c_mem)  # (..., V)
