"""A teacher distilled from trained memories: their next-token distributions averaged, as sparse targets.

Memories trained alike but from different seeds make different errors at this data size; their distributions
averaged in probability space score better than any one of them (the ``seeds`` ablation), at N times the inference
cost. Training one new memory against that average keeps part of the gain at one memory's cost (ensemble
distillation). For datastore position q with key f(c_q):

    p_target(y | c_q) = (1 − β) · (1/N) Σ_i p_i(y | f(c_q)) + β · p_kNN(y | c_q),

with β = ``knn_weight`` mixing in the run's kNN teacher (its top-K; its residual mass stays residual). The rows
have the kNN teacher's sparse form (:mod:`mlpmem.teacher`: top-K ids, fp16 probabilities, residual mass), so a
memory trains on them unchanged: maintenance teaches a memory its own distribution with them, and the studies build
a whole distilled teacher (``studies.distil_teacher``).
"""

from __future__ import annotations

import numpy as np
import torch

from mlpmem.compute import model_device
from mlpmem.memory import MLPMemory
from mlpmem.teacher import Rows, top_rows


@torch.no_grad()
def averaged_probs(memories: list[MLPMemory], keys: np.ndarray) -> torch.Tensor:
    """(n, V') the memories' distributions at ``keys`` averaged, over their head's rows."""
    x = torch.from_numpy(np.asarray(keys, np.float32)).to(model_device(memories[0]))
    total = None
    for m in memories:
        p = torch.softmax(m(x, full_vocab=False).float(), dim=-1)
        total = p if total is None else total.add_(p)
    return total.div_(len(memories)).cpu()


def head_columns(ids: np.ndarray, vocab_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns of full-vocabulary ``ids`` (n, K) in a head with rows ``vocab_ids`` and whether each is covered
    (``-1`` pads and tokens outside a corpus head are not)."""
    t = torch.from_numpy(ids.astype(np.int64))
    if vocab_ids is None:
        return t.clamp_min(0), t >= 0
    cols = torch.searchsorted(vocab_ids, t.clamp_min(0)).clamp(max=len(vocab_ids) - 1)
    return cols, (t >= 0) & (vocab_ids[cols] == t)


def distilled_rows(memories: list[MLPMemory], keys: np.ndarray, knn: Rows | None, knn_weight: float,
                   top_k: int) -> Rows:
    """The sparse targets of ``keys``: the memories' average, mixed with the kNN rows ``knn`` at ``knn_weight``."""
    probs = averaged_probs(memories, keys)  # on the CPU, like the kNN rows
    vocab_ids = None if memories[0].vocab_ids is None else memories[0].vocab_ids.cpu()
    if knn is not None and knn_weight > 0:
        ids, knn_probs, _ = knn
        cols, covered = head_columns(ids, vocab_ids)
        mass = torch.from_numpy(knn_probs.astype(np.float32)) * covered
        probs.mul_(1.0 - knn_weight).scatter_add_(1, cols, knn_weight * mass)
    return top_rows(probs, top_k, vocab_ids)
