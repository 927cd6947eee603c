"""The corpus-vocabulary head: the memory's softmax over the tokens its training can ever ask for.

A memory trained on a corpus is only ever taught the corpus's next tokens: the cross-entropy targets, and the
kNN teacher, whose support is the datastore's values (the same next tokens). Every other row of a full
vocabulary head only learns to be small. The corpus head keeps the sorted ids of the tokens that can occur
as targets (``vocab_ids``, stored with the memory) and computes logits for them alone, a ``V' x H`` head
instead of ``V x H`` — gathered from the backbone's embedding when the head is tied.

Outside ``vocab_ids`` the memory's probability is exactly 0 (logit ``-inf`` in the full-vocabulary view).
The mixture ``(1 - lam) p_lm + lam p_mem`` stays a distribution for every lam: an uncovered token keeps
``(1 - lam) p_lm``, and lam = 0 / lam = 1 still give p_lm / p_mem exactly. The memory alone gives an
uncovered target probability 0, so its own perplexity is reported over the covered positions, with the
coverage beside it (:func:`covered_perplexity`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

from mlpmem.errors import ConfigError


def corpus_vocabulary(id_arrays: Iterable[np.ndarray], vocab_size: int) -> np.ndarray:
    """The sorted unique token ids (int64) in ``id_arrays`` (any shapes, ``-1`` pads ignored), streamed: one
    boolean per vocabulary entry is all that is kept."""
    seen = np.zeros(vocab_size, dtype=bool)
    for ids in id_arrays:
        ids = np.asarray(ids).reshape(-1)
        ids = ids[ids >= 0]
        if ids.size and ids.max() >= vocab_size:
            raise ConfigError(f"token id {int(ids.max())} is outside the vocabulary of {vocab_size}")
        seen[ids] = True
    vocab = np.flatnonzero(seen).astype(np.int64)
    if vocab.size == 0:
        raise ConfigError("the corpus vocabulary is empty: no target token to build a head over")
    return vocab


def check_vocab_ids(vocab_ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a one-line error unless ``vocab_ids`` is a strictly increasing 1-D int64 tensor in [0, V)."""
    if vocab_ids.ndim != 1 or vocab_ids.dtype != torch.int64 or vocab_ids.numel() == 0:
        raise ConfigError(f"vocab_ids must be a non-empty 1-D int64 tensor, got {vocab_ids.dtype} "
                          f"{tuple(vocab_ids.shape)}")
    if vocab_ids[0] < 0 or vocab_ids[-1] >= vocab_size or (vocab_ids.numel() > 1 and
                                                          not bool((vocab_ids[1:] > vocab_ids[:-1]).all())):
        raise ConfigError(f"vocab_ids must be strictly increasing token ids in [0, {vocab_size})")


def index_of(vocab_ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """The map full token id -> position in ``vocab_ids`` (int64, ``-1`` for an uncovered token), shape (V,)."""
    index = np.full(vocab_size, -1, dtype=np.int64)
    index[np.asarray(vocab_ids)] = np.arange(len(vocab_ids))
    return index


def to_head_ids(ids: np.ndarray, index: np.ndarray, what: str) -> np.ndarray:
    """Full-vocabulary ids (``-1`` pads kept) as head positions; an uncovered id is an error (a training target
    outside the head would be a wrong vocabulary, not a rare token)."""
    out = np.where(ids >= 0, index[np.clip(ids, 0, None)], -1)
    if ((out < 0) & (ids >= 0)).any():
        raise ConfigError(f"{what} holds tokens outside the memory's corpus vocabulary: it was built from "
                          "another corpus or teacher")
    return out


def covered_perplexity(logprobs: np.ndarray) -> tuple[float, float]:
    """(perplexity over the positions with a finite log-prob, fraction of such positions): the memory alone
    under a corpus head scores only the targets it covers."""
    lp = np.asarray(logprobs, dtype=np.float64)
    finite = np.isfinite(lp)
    if not finite.any():
        return math.inf, 0.0
    return math.exp(-lp[finite].mean()), float(finite.mean())
