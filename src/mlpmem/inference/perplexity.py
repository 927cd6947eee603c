"""Token-weighted perplexity from per-token log-probabilities, and the sharpness of a next-token distribution."""

from __future__ import annotations

import math

import numpy as np
import torch

from mlpmem.inference.mixing import mix


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
    return {lam: perplexity(mix(a, b, lam, logits=False)) for lam in lambdas}


def best_lambda(curve: dict[float, float]) -> float:
    """The λ of lowest perplexity; ties go to the smaller λ (closer to the backbone)."""
    return min(curve, key=lambda lam: (curve[lam], lam))


MASS_CANDIDATES = 4096
"""Tokens per row that :func:`tokens_for_masses` ranks first (a partial sort); rows they do not cover are sorted in
full."""


def tokens_for_mass(probs: torch.Tensor, fraction: float) -> torch.Tensor:
    """Per row, the number of most probable tokens whose mass reaches ``fraction``: (n, m) -> (n,)."""
    return tokens_for_masses(probs, (fraction,))[0]


def tokens_for_masses(probs: torch.Tensor, fractions) -> list[torch.Tensor]:
    """:func:`tokens_for_mass` for each of ``fractions``, from one ranking of each row.

    Only the :data:`MASS_CANDIDATES` most probable tokens of a row are ranked (``topk``, several times faster than
    sorting a vocabulary-wide row); a row whose candidates hold less than the largest fraction is sorted in full.
    The counts equal a full sort's: the ranked values and their running sums are the same up to that point.
    """
    limits = [f - 1e-9 for f in fractions]
    top = torch.topk(probs, min(MASS_CANDIDATES, probs.shape[1]), dim=1).values  # (n, c), descending
    sums = torch.cumsum(top, dim=1)
    short = sums[:, -1] < max(limits)  # (n,) rows whose candidates do not reach the largest fraction
    counts = [(sums < limit).sum(1) + 1 for limit in limits]
    if short.any():
        full = torch.cumsum(torch.sort(probs[short], dim=1, descending=True).values, dim=1)
        for count, limit in zip(counts, limits):
            count[short] = (full < limit).sum(1) + 1
    return counts
