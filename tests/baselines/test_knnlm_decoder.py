"""kNN-LM decoding path of the benchmark: p_kNN from neighbours, one-pass hooks, combined keystores, cached index."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.tiny import PAD, VOCAB, TinyTokenizer, left_padded, tiny_backbone
from mlpmem.backbone import KeyHook, resolve_layer
from mlpmem.baselines.knnlm import (
    CombinedKeyStore,
    KnnLMDecoder,
    cached_index,
    knn_mix_log_probs,
)
from mlpmem.datastore import KeystoreConfig, build_keystore
from mlpmem.errors import FingerprintMismatch
from mlpmem.index import ExactIndex, IndexConfig
from mlpmem.inference.mixing import mix
from mlpmem.teacher import exclude_and_weight


def knn_log_probs(dists: np.ndarray, ids: np.ndarray, values: np.ndarray, temperature: float,
                  vocab_size: int) -> torch.Tensor:
    """log p_kNN (B, V) from the neighbours of B queries: softmax(−d/T) weights summed per next token."""
    d, i = torch.from_numpy(dists).double(), torch.from_numpy(ids)  # (B, k)
    weights = exclude_and_weight(d, i, None, i.shape[1], temperature)  # (B, k), −1 ids get 0
    tokens = torch.from_numpy(values[np.clip(ids, 0, None)].astype(np.int64))  # (B, k)
    p = torch.zeros(len(ids), vocab_size, dtype=torch.float64).scatter_add_(1, tokens, weights)  # (B, V)
    return p.log().float()  # −inf for tokens no neighbour predicts


def test_knn_log_probs_equals_a_loop():
    rng = np.random.default_rng(0)
    dists = rng.uniform(0, 5, (3, 6)).astype(np.float32)
    ids = rng.integers(0, 10, (3, 6))
    ids[1, 4:] = -1  # fewer neighbours than k
    values = rng.integers(0, 5, 10).astype(np.int32)
    got = knn_log_probs(dists, ids, values, temperature=2.0, vocab_size=5).exp()
    for r in range(3):
        valid = ids[r] >= 0
        w = np.exp(-dists[r][valid] / 2.0)
        w /= w.sum()
        expected = np.zeros(5)
        np.add.at(expected, values[ids[r][valid]], w)
        np.testing.assert_allclose(got[r].numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_sparse_knn_mix_equals_the_dense_mixture(lam):
    """Duplicated tokens, a row with no valid neighbour, λ at both ends: the same as mixing the dense p_kNN."""
    rng = np.random.default_rng(1)
    dists = rng.uniform(0, 5, (4, 7)).astype(np.float32)
    ids = rng.integers(0, 12, (4, 7))
    ids[1, 3:] = -1
    ids[2] = -1  # no neighbour at all: the backbone alone, weighted 1 - λ
    values = rng.integers(0, 3, 12).astype(np.int32)  # 3 of 6 tokens: many neighbours share one
    logp_lm = F.log_softmax(torch.randn(4, 6), -1)
    dense = mix(logp_lm, knn_log_probs(dists, ids, values, temperature=2.0, vocab_size=6), lam, logits=False)
    got = knn_mix_log_probs(logp_lm, dists, ids, values, temperature=2.0, lam=lam)
    torch.testing.assert_close(got, dense, rtol=0, atol=1e-6)
    assert got.shape == logp_lm.shape and got.dtype == logp_lm.dtype


def tiny_datastore(tmp_path, model, seed=0, name="ds", n_docs=3, length=60):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1, VOCAB, length).astype(np.int32) for _ in range(n_docs)]
    build_keystore(KeystoreConfig(layer=-1, block_size=32, stride=16, batch_size=2, batches_per_shard=2), model,
                   TinyTokenizer(), docs, tmp_path / name, progress=False)
    return tmp_path / name


def decoder(tmp_path, lam=0.5):
    model = tiny_backbone("llama")
    store = CombinedKeyStore([tiny_datastore(tmp_path, model)])
    index = ExactIndex(store.array("keys"))
    return KnnLMDecoder(model, index, store.array("values"), store.layer, store.site, k=8, temperature=3.0,
                        lam=lam), index, store


def test_decoder_mixes_the_searched_neighbours(tmp_path):
    knn, index, store = decoder(tmp_path, lam=0.3)
    x = torch.tensor([[5, 17, 3, 99, 42, 7]])
    with torch.no_grad():
        with KeyHook(knn.backbone, resolve_layer(knn.backbone, -1), "ffn_input") as hook:
            lm = knn.backbone(input_ids=x).logits
        d, i = index.search(hook.keys[0].numpy(), 8)
        expected = mix(F.log_softmax(lm, -1), knn_log_probs(d, i, store.array("values"), 3.0, VOCAB)[None], 0.3,
                       logits=False)
        got = knn(input_ids=x).logits
        last = knn(input_ids=x, logits_to_keep=1).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(last, got[:, -1:], rtol=0, atol=1e-5)
    assert knn.search_seconds > 0


def test_decoder_generate_cached_equals_uncached_and_lambda_zero_is_backbone(tmp_path):
    knn, _, _ = decoder(tmp_path, lam=0.5)
    ids, mask = left_padded([[5, 17, 3, 99], [8, 9]])
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    assert torch.equal(knn.generate(**kwargs, use_cache=True), knn.generate(**kwargs, use_cache=False))
    knn.lam = 0.0
    assert torch.equal(knn.generate(**kwargs), knn.backbone.generate(**kwargs))


def test_combined_keystore_concatenates_and_checks_the_backbone(tmp_path):
    model = tiny_backbone("llama")
    a, b = tiny_datastore(tmp_path, model, 0, "a"), tiny_datastore(tmp_path, model, 1, "b", n_docs=2)
    store = CombinedKeyStore([a, b])
    parts = [CombinedKeyStore([a]), CombinedKeyStore([b])]
    assert store.num_rows == parts[0].num_rows + parts[1].num_rows
    np.testing.assert_array_equal(store.array("values"), np.concatenate([p.array("values") for p in parts]))
    offsets = [start for start, _ in store.iter_shards("keys")]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert sum(len(s) for _, s in store.iter_shards("keys")) == store.num_rows
    assert offsets[len(list(parts[0].iter_shards("keys")))] == parts[0].num_rows
    rows = store.rows("keys")  # lazily read rows across both keystores, as the FAISS index reads them
    pick = np.array([0, parts[0].num_rows - 1, parts[0].num_rows, store.num_rows - 1])
    np.testing.assert_array_equal(rows[pick], store.array("keys")[pick])
    other = tiny_datastore(tmp_path, tiny_backbone("llama", seed=7), 0, "c")
    with pytest.raises(FingerprintMismatch):
        CombinedKeyStore([a, other])


def test_cached_index_is_reused_and_rebuilt_on_change(tmp_path):
    model = tiny_backbone("llama")
    store = CombinedKeyStore([tiny_datastore(tmp_path, model, n_docs=8, length=100)])
    cfg = IndexConfig(kind="ivf_flat", nlist=4, nprobe=4)
    first = cached_index(store, cfg, tmp_path / "idx", progress=False)
    stamp = (tmp_path / "idx" / "index.faiss").stat().st_mtime_ns
    again = cached_index(store, cfg, tmp_path / "idx", progress=False)
    assert (tmp_path / "idx" / "index.faiss").stat().st_mtime_ns == stamp
    q = store.array("keys")[:5].astype(np.float32)
    np.testing.assert_array_equal(first.search(q, 3)[1], again.search(q, 3)[1])
    assert (again.search(q, 1)[1][:, 0] == np.arange(5)).mean() >= 0.8  # a key is (nearly always) its own neighbour
    cached_index(store, IndexConfig(kind="ivf_flat", nlist=2, nprobe=2), tmp_path / "idx", progress=False)
    assert (tmp_path / "idx" / "index.faiss").stat().st_mtime_ns != stamp
