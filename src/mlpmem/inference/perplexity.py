"""Token-weighted perplexity from per-token log-probabilities, and the sharpness of a next-token distribution."""

from __future__ import annotations

import math

import numpy as np
import torch

from mlpmem.inference.mixing import mix_log_probs


def perplexity(logprobs: np.ndarray | torch.Tensor) -> float:
    """exp(−mean log p) over all scored tokens (every token weighs the same, whatever its document)."""
    lp = torch.as_tensor(np.asarray(logprobs), dtype=torch.float64)
    if lp.numel() == 0:
        raise ValueError("perplexity of an empty set of tokens")
    return math.exp(-lp.mean().item())


def lambda_curve(lp_a, lp_b, lambdas) -> dict[float, float]:
    """Perplexity of ``(1 − λ)·p_a + λ·p_b`` for each λ, from per-token log-probs of the target."""
    a = torch.as_tensor(np.asarray(lp_a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(lp_b), dtype=torch.float64)
    return {lam: perplexity(mix_log_probs(a, b, lam)) for lam in lambdas}


def best_lambda(curve: dict[float, float]) -> float:
    """The λ of lowest perplexity; ties go to the smaller λ (closer to the backbone)."""
    return min(curve, key=lambda lam: (curve[lam], lam))


def tokens_for_mass(probs: torch.Tensor, fraction: float) -> torch.Tensor:
    """Per row, the number of most probable tokens whose mass reaches ``fraction``: (n, m) -> (n,)."""
    p = torch.sort(probs, dim=1, descending=True).values
    below = torch.cumsum(p, dim=1) < fraction - 1e-9
    return below.sum(1) + 1
