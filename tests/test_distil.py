"""The distilled teacher: the memories' distributions averaged (and mixed with the kNN teacher) as sparse targets."""

import numpy as np
import torch

from helpers.tiny import seeded_memory
from mlpmem.distil import distilled_rows

D, V = 8, 20


def _dense(rows) -> np.ndarray:
    ids, probs, _ = rows
    out = np.zeros((len(ids), V))
    for r in range(len(ids)):
        for i, p in zip(ids[r], probs[r]):
            if i >= 0:
                out[r, i] += p
    return out


def test_the_average_of_memories_top_k_with_its_residual():
    a, b = seeded_memory(0), seeded_memory(1)
    keys = np.random.default_rng(0).normal(size=(5, D)).astype(np.float32)
    with torch.no_grad():
        x = torch.from_numpy(keys)
        ref = ((torch.softmax(a(x), -1) + torch.softmax(b(x), -1)) / 2).numpy()
    ids, probs, residual = distilled_rows([a, b], keys, None, 0.0, top_k=V)
    np.testing.assert_allclose(_dense((ids, probs, residual)), ref, atol=1e-6)
    ids, probs, residual = distilled_rows([a, b], keys, None, 0.0, top_k=4)
    assert ids.shape == (5, 4) and ids.dtype == np.int32
    np.testing.assert_allclose(probs, np.sort(ref, 1)[:, ::-1][:, :4], atol=1e-6)  # the 4 most probable
    np.testing.assert_allclose(probs.sum(1) + residual, 1.0, atol=1e-6)


def test_knn_rows_mixed_in_at_their_weight():
    a = seeded_memory(0)
    keys = np.random.default_rng(1).normal(size=(3, D)).astype(np.float32)
    knn = (np.array([[2, 5, -1]] * 3, np.int32), np.array([[0.6, 0.3, 0.0]] * 3, np.float32),
           np.full(3, 0.1, np.float32))
    alone = _dense(distilled_rows([a], keys, None, 0.0, top_k=V))
    mixed = _dense(distilled_rows([a], keys, knn, 0.25, top_k=V))
    np.testing.assert_allclose(mixed, 0.75 * alone + 0.25 * _dense(knn), atol=1e-6)  # the kNN residual stays out
    only = distilled_rows([a], keys, knn, 1.0, top_k=2)
    assert (only[0] == [[2, 5]] * 3).all() and np.allclose(only[1], [[0.6, 0.3]] * 3, atol=1e-6)


def test_a_corpus_head_gives_full_vocabulary_ids():
    vocab_ids = torch.tensor([1, 4, 7, 9, 12, 15])
    a = seeded_memory(0, head_vocab_size=6)
    a.set_head_vocab(vocab_ids)
    keys = np.random.default_rng(2).normal(size=(4, D)).astype(np.float32)
    knn = (np.array([[4, 3, -1]] * 4, np.int32), np.array([[0.5, 0.2, 0.0]] * 4, np.float32),
           np.full(4, 0.3, np.float32))
    ids, probs, residual = distilled_rows([a], keys, knn, 0.5, top_k=3)
    assert set(ids.ravel().tolist()) <= set(vocab_ids.tolist())  # token 3 is outside the head: its mass is residual
    np.testing.assert_allclose(probs.sum(1) + residual, 1.0, atol=1e-6)
