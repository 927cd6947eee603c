"""Regularisers of the memory's training that need the step's randomness: noise on the input keys.

A memory distilled from a few tens of thousands of keys can fit each key's teacher row exactly and carry
nothing to a new key. The kNN teacher is smooth in key space (neighbouring keys share neighbours), so keys
perturbed by a little noise should keep their targets: Gaussian noise of standard deviation
``key_noise x RMS(key)`` per row (relative, so one setting fits keys of any scale) asks the memory to be
smooth where the teacher is.

The noise of a step is drawn from a generator seeded by (seed, step) for the whole batch in its sorted
row order, and each process takes its own rows' noise: a resumed run and any number of processes draw the
same noise for the same row.
"""

from __future__ import annotations

import numpy as np
import torch


def step_generator(seed: int, step: int) -> torch.Generator:
    """A generator that depends only on (seed, step)."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, step]).generate_state(1)[0]))


def noisy_keys(keys: torch.Tensor, batch_rows: np.ndarray, rows: np.ndarray, scale: float, seed: int,
               step: int) -> torch.Tensor:
    """``keys`` (n, d) of ``rows`` (a subset of the step's ``batch_rows``) plus relative Gaussian noise."""
    if scale == 0.0:
        return keys
    everyone = np.sort(batch_rows)
    noise = torch.randn(len(everyone), keys.shape[1], generator=step_generator(seed, step))  # (B, d)
    mine = noise[torch.from_numpy(np.searchsorted(everyone, np.sort(rows)))]  # (n, d): batch() sorts its rows
    rms = keys.float().pow(2).mean(-1, keepdim=True).sqrt()  # (n, 1)
    return keys + scale * rms * mine
