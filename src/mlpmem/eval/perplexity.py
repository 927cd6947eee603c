"""Token-weighted perplexity from per-token log-probabilities."""

from __future__ import annotations

import math

import numpy as np
import torch


def perplexity(logprobs: np.ndarray | torch.Tensor) -> float:
    """exp(−mean log p) over all scored tokens (every token weighs the same, whatever its document)."""
    lp = torch.as_tensor(np.asarray(logprobs), dtype=torch.float64)
    if lp.numel() == 0:
        raise ValueError("perplexity of an empty set of tokens")
    return math.exp(-lp.mean().item())
