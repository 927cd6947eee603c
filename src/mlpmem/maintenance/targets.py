"""Sparse targets an operation teaches: kNN rows against the changed datastore, the backbone's own distribution,
and the mixed label that lets one loop weigh rows differently.

Every target is in the teacher's sparse form (:mod:`mlpmem.teacher`): top-K token ids (int32, ``-1`` pads), their
probabilities and the residual mass ``1 - Σ top-K``.

- :func:`knn_rows`: the teacher of :func:`mlpmem.teacher.build_teacher` for given query keys, searched in any
  store (self excluded by id when the queries are datastore rows);
- :func:`backbone_rows`: the backbone's next-token distribution at every scored position of some documents, top-K
  (the target of a forgotten position: as if the memory added nothing there);
- :func:`memory_rows`: the memory's own top-K distribution at given keys (the target of a replayed position under
  ``update.replay_targets: memory``: the memory is taught to keep what it predicted, as in learning without
  forgetting, instead of being fitted to the teacher again);
- :func:`fold_label`: ``α·p + (1 − α)·δ(target)`` as one sparse row. For a fixed teacher the hybrid loss
  ``α·KL(p‖q) + (1 − α)·CE`` equals the cross-entropy against that label plus a constant
  (:mod:`mlpmem.training.loss`), so with every row folded the training loop runs at α = 1 and each row carries its
  own weight: replayed rows keep the run's α, forgotten rows get none on their own token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem.backbone import base_model, output_logits
from mlpmem.compute import inference_scope, model_device
from mlpmem.corpora.documents import make_windows
from mlpmem.datastore import pad_windows
from mlpmem.distil import distilled_rows
from mlpmem.teacher import Rows, knn_sparse, top_rows


def empty_rows(top_k: int) -> Rows:
    return np.zeros((0, top_k), np.int32), np.zeros((0, top_k), np.float32), np.zeros(0, np.float32)


def concat_rows(parts: list[Rows], top_k: int) -> Rows:
    if not parts:
        return empty_rows(top_k)
    return tuple(np.concatenate(x) for x in zip(*parts))  # type: ignore[return-value]


def knn_rows(index, queries, query_ids: np.ndarray | None, values, k: int, temperature: float, top_k: int,
             batch: int = 512, progress: bool = False, desc: str = "teacher") -> Rows:
    """Sparse kNN targets of ``queries`` (rows of keys, (n, d)) searched in ``index`` whose row ids index
    ``values``; ``query_ids`` (n,) are the queries' own ids in that store (excluded), None for outside queries."""
    parts = []
    for b in tqdm(range(0, len(queries), batch), desc=desc, disable=not progress, dynamic_ncols=True):
        q = np.asarray(queries[b : b + batch], dtype=np.float32)  # (B, d)
        extra = 0 if query_ids is None else 1
        d, i = index.search(q, k + extra)
        qid = None if query_ids is None else query_ids[b : b + batch]
        parts.append(knn_sparse(d, i, values, qid, k, temperature, top_k))
    return concat_rows(parts, top_k)


@torch.no_grad()
def backbone_rows(model, token_docs: Sequence[np.ndarray], block_size: int, stride: int, top_k: int,
                  precision: str = "fp32", batch_size: int = 4) -> Rows:
    """The backbone's top-K next-token distribution at every scored target of ``token_docs``, in datastore row
    order (the windows of :func:`~mlpmem.corpora.documents.make_windows`, one scored target each)."""
    windows = make_windows([len(t) for t in token_docs], block_size, stride)
    parts = []
    with inference_scope(model, precision):  # each weight cast once; the head runs in fp32 (output_logits)
        for b in range(0, len(windows), batch_size):
            batch = [windows[j] for j in range(b, min(b + batch_size, len(windows)))]
            input_ids, mask = pad_windows(token_docs, batch, device=model_device(model))  # (B, T)
            hidden = base_model(model)(input_ids=input_ids, attention_mask=mask, use_cache=False)[0]  # (B, T, d)
            for r, w in enumerate(batch):  # one window at a time: (m, V) probabilities, never (B·m, V)
                probs = torch.softmax(output_logits(model, hidden[r, w.positions]).float(), dim=-1)  # (m, V)
                parts.append(top_rows(probs, top_k))
    return concat_rows(parts, top_k)


def memory_rows(memory, keys, top_k: int, batch: int = 1024) -> Rows:
    """The ``memory``'s top-K next-token distribution at ``keys`` (n, d), as full-vocabulary ids (a corpus head's
    rows mapped back through its ``vocab_ids``)."""
    memory.eval()
    parts = [distilled_rows([memory], keys[b : b + batch], None, 0.0, top_k) for b in range(0, len(keys), batch)]
    return concat_rows(parts, top_k)


def restrict_to_head(rows: Rows, head_ids: np.ndarray | None) -> Rows:
    """Targets on tokens a corpus head cannot score moved into the residual (their ids become ``-1`` pads); the
    rows unchanged for a full head (``head_ids`` None)."""
    if head_ids is None:
        return rows
    ids, probs, residual = rows
    covered = np.isin(ids, head_ids) & (ids >= 0)
    moved = np.where(covered | (ids < 0), 0.0, probs).sum(1)
    return (np.where(covered, ids, -1).astype(np.int32), np.where(covered, probs, 0.0).astype(np.float32),
            (residual + moved).astype(np.float32))


def fold_label(rows: Rows, targets: np.ndarray, alpha: float) -> Rows:
    """``α·p + (1 − α)·δ(target)`` as sparse rows of ``K + 1`` columns: the target's mass is added to its column,
    or to the extra column when it is outside the top-K; the residual is scaled by ``α``."""
    ids, probs, residual = rows
    n, k = ids.shape
    out_ids = np.concatenate([ids, np.full((n, 1), -1, np.int32)], 1)  # (n, K + 1)
    out_probs = np.concatenate([alpha * probs.astype(np.float64), np.zeros((n, 1))], 1)
    hit = ids == targets[:, None]  # (n, K)
    inside = hit.any(1)
    out_probs[np.arange(n), np.where(inside, hit.argmax(1), k)] += 1.0 - alpha
    out_ids[~inside, k] = targets[~inside]
    return out_ids.astype(np.int32), out_probs.astype(np.float32), (alpha * residual).astype(np.float32)


def pure_label(rows: Rows) -> Rows:
    """Rows taught as they are (no cross-entropy term), padded to the ``K + 1`` columns of :func:`fold_label`."""
    ids, probs, residual = rows
    n = len(ids)
    return (np.concatenate([ids, np.full((n, 1), -1, np.int32)], 1).astype(np.int32),
            np.concatenate([probs, np.zeros((n, 1), np.float32)], 1).astype(np.float32), residual.astype(np.float32))
