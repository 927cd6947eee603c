import numpy as np
import pytest
import torch

from helpers.corpus import corpus_text
from helpers.faults import killed_after_first_shard
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import ConfigError, FingerprintMismatch
from mlpmem.index import LIST_BATCH, ExactIndex, FaissIndex, IndexConfig, build_index, open_or_build
from mlpmem.teacher import (
    TeacherConfig,
    TeacherStore,
    aggregate_by_token,
    build_teacher,
    exclude_and_weight,
    shard_groups,
)

KW = dict(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=2)


def aggregate_reference(tokens: np.ndarray, weights: np.ndarray, top_k: int):
    """Plain-loop reference of :func:`mlpmem.teacher.aggregate_by_token`."""
    ids = np.full((len(tokens), top_k), -1, dtype=np.int64)
    probs = np.zeros((len(tokens), top_k), dtype=np.float64)
    for r, (tok_row, w_row) in enumerate(zip(tokens, weights)):
        sums: dict[int, float] = {}
        for t, w in zip(tok_row, w_row):
            sums[int(t)] = sums.get(int(t), 0.0) + float(w)
        best = sorted(((p, t) for t, p in sums.items() if p > 0), key=lambda x: (-x[0], x[1]))[:top_k]
        for j, (p, t) in enumerate(best):
            ids[r, j], probs[r, j] = t, p
    return ids, probs


@pytest.fixture()
def store_dir(tiny_llama, tiny_tokenizer, tmp_path):
    # duplicated documents: identical contexts give identical keys (distance-0 ties with the query itself)
    texts = corpus_text(4) * 2
    docs = tokenize_documents([Document(str(i), t) for i, t in enumerate(texts)], tiny_tokenizer)
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    return tmp_path / "ds"


def test_aggregation_equals_reference_loop():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 7, (50, 20), generator=g)
    weights = torch.softmax(torch.randn(50, 20, generator=g), 1)
    weights[:5, 10:] = 0  # some rows with fewer valid neighbours
    ids, probs = aggregate_by_token(tokens, weights, top_k=4)
    ref_ids, ref_probs = aggregate_reference(tokens.numpy(), weights.numpy(), 4)
    np.testing.assert_allclose(probs.numpy(), ref_probs, rtol=1e-5, atol=1e-6)
    # ids agree wherever probabilities are not tied
    untied = np.abs(np.diff(ref_probs, axis=1, append=-1)) > 1e-6
    assert np.array_equal(ids.numpy()[untied & (ref_probs > 0)], ref_ids[untied & (ref_probs > 0)])


def test_exclusion_is_by_id_not_by_rank():
    dists = torch.tensor([[0.0, 0.0, 1.0, 2.0]])  # a tie at distance 0: the query is the *second* hit
    ids = torch.tensor([[7, 3, 5, 9]])
    w = exclude_and_weight(dists, ids, torch.tensor([3]), k=2, temperature=1.0)
    assert w[0, 1] == 0 and w[0, 3] == 0  # self excluded, only k=2 kept: ids 7 and 5
    torch.testing.assert_close(w[0, [0, 2]], torch.softmax(torch.tensor([0.0, -1.0]), 0))


def test_no_position_is_its_own_neighbour_even_with_duplicates(store_dir, tmp_path):
    store = KeyStore(store_dir)
    keys = store.array("keys")
    index = ExactIndex(keys)
    d, i = index.search(keys[:64].astype(np.float32), 9)
    assert (d[:, 0] < 1e-3).all()  # duplicated text: several distance-0 hits
    w = exclude_and_weight(torch.from_numpy(d), torch.from_numpy(i), torch.arange(64), 8, 1.0)
    assert not ((torch.from_numpy(i) == torch.arange(64)[:, None]) & (w > 0)).any()
    assert ((w > 0).sum(1) == 8).all()


def test_teacher_rows_sum_to_one_and_are_sparse(store_dir, tmp_path):
    cfg = TeacherConfig(k=16, temperature=2.0, top_k=4, query_batch=7)
    manifest = build_teacher(store_dir, tmp_path / "t", cfg, progress=False)
    store = KeyStore(store_dir)
    teacher = TeacherStore(tmp_path / "t", datastore=store)
    assert teacher.num_rows == store.num_rows
    ids, probs, residual = teacher.array("ids"), teacher.array("probs"), teacher.array("residual")
    assert ids.shape == (store.num_rows, 4) and ids.dtype == np.int32 and probs.dtype == np.float16
    np.testing.assert_allclose(probs.astype(np.float64).sum(1) + residual, 1.0, atol=2e-3)
    assert ((ids >= 0) | (probs == 0)).all()
    assert manifest["bytes_per_token"] == 4 * 6 + 4
    # teacher row 0 equals a direct computation from exact neighbours
    keys, values = store.array("keys").astype(np.float32), store.array("values")
    d = ((keys - keys[0]) ** 2).sum(1)
    d[0] = np.inf
    nn = np.argsort(d, kind="stable")[:16]
    w = torch.softmax(torch.from_numpy(-d[nn] / 2.0), 0).numpy()
    ref_ids, ref_probs = aggregate_reference(values[nn][None], w[None], 4)
    np.testing.assert_allclose(probs[0], ref_probs[0], atol=2e-3)


def test_teacher_resumes_and_checks_datastore(store_dir, tmp_path, monkeypatch):
    cfg = TeacherConfig(k=8, temperature=1.0, top_k=4)
    build_teacher(store_dir, tmp_path / "full", cfg, progress=False)
    import mlpmem.teacher as tm

    with killed_after_first_shard(monkeypatch, tm):
        build_teacher(store_dir, tmp_path / "part", cfg, progress=False)
    build_teacher(store_dir, tmp_path / "part", cfg, progress=False)
    for f in sorted((tmp_path / "full").glob("*.npy")):
        assert f.read_bytes() == (tmp_path / "part" / f.name).read_bytes()


def test_teacher_errors(store_dir, tmp_path):
    store = KeyStore(store_dir)
    with pytest.raises(ConfigError, match="smaller than the datastore"):
        build_teacher(store_dir, tmp_path / "t", TeacherConfig(k=store.num_rows), progress=False)
    with pytest.raises(ConfigError, match="temperature"):
        TeacherConfig(temperature=0)
    build_teacher(store_dir, tmp_path / "t", TeacherConfig(k=4, top_k=2), progress=False)
    manifest = store_dir / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"stride": 12', '"stride": 12 '))
    with pytest.raises(FingerprintMismatch, match="another datastore"):
        TeacherStore(tmp_path / "t", datastore=KeyStore(store_dir))


def _clustered_store(n: int = 4000, d: int = 16, path: str = "mem"):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(20, d)).astype(np.float32) * 4
    keys = (centers[rng.integers(0, 20, n)] + rng.normal(size=(n, d))).astype(np.float16)

    class Store:  # the things an index needs of a keystore
        num_rows, hidden_size = n, d

        def array(self, name):
            return keys

        def iter_shards(self, name):
            yield 0, keys[: n * 5 // 8]
            yield n * 5 // 8, keys[n * 5 // 8 :]

    Store.path = path
    return keys, Store()


@pytest.mark.parametrize("kind", ["ivf_flat", "ivf_pq"])
def test_ivf_agrees_with_exact(kind):
    keys, store = _clustered_store()
    exact = ExactIndex(keys)
    approx = build_index(store, IndexConfig(kind=kind, nlist=16, nprobe=16, pq_bytes=8, rerank=True))
    assert isinstance(approx, FaissIndex)
    q = keys[:100].astype(np.float32) + 0.1
    de, ie = exact.search(q, 10)
    da, ia = approx.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ia, ie)])
    assert recall > (0.99 if kind == "ivf_flat" else 0.8)
    np.testing.assert_allclose(de[:, 0], da[:, 0], rtol=1e-3, atol=1e-3)


def test_a_large_ivf_flat_batch_searched_list_by_list_equals_the_query_by_query_search(tmp_path):
    """The same probed lists give the same neighbours (distances to float rounding), in the saved and
    memory-mapped index too; fewer than k candidates are -1 / inf in both paths."""
    (tmp_path / "ds").mkdir()
    keys, store = _clustered_store(path=str(tmp_path / "ds"))
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    cfg = IndexConfig(kind="ivf_flat", nlist=16, nprobe=4)
    for index in (build_index(store, cfg), open_or_build(store, cfg, tmp_path / "index")):
        q = keys[:1000].astype(np.float32) + 0.05
        small, large = 8, LIST_BATCH * 16 // 4
        assert not index.list_by_list(small) and index.list_by_list(large)
        d_one, i_one = index.index.search(q[:large], 50)  # FAISS, query by query
        d, i = index.search(q[:large], 50)
        assert (np.mean([len(set(a) & set(b)) / 50 for a, b in zip(i, i_one)])) > 0.999
        np.testing.assert_allclose(d, d_one, rtol=1e-4, atol=1e-3)
        d_few, i_few = index.search(q[:large], 3000)  # more than 4 of 16 lists hold
        assert (i_few < 0).any() and np.isinf(d_few[i_few < 0]).all() and np.isfinite(d_few[i_few >= 0]).all()
        d_few_one, i_few_one = index.search(q[:small], 3000)
        assert np.array_equal(i_few_one < 0, i_few[:small] < 0) and np.isinf(d_few_one[i_few_one < 0]).all()


def test_shard_groups_hold_a_search_batch_of_consecutive_shards():
    sizes = [5, 5, 5, 12, 3]
    assert shard_groups([0, 1, 2, 3, 4], sizes, 10) == [[0, 1], [2, 3], [4]]
    assert shard_groups([1, 3, 4], sizes, 4) == [[1], [3], [4]]
    assert shard_groups([], sizes, 4) == []


def test_teacher_search_batches_spanning_shards_give_the_same_targets(store_dir, tmp_path):
    base = dict(k=8, temperature=1.0, top_k=4)
    build_teacher(store_dir, tmp_path / "one", TeacherConfig(**base, query_batch=16), progress=False)
    rows = KeyStore(store_dir).num_rows
    build_teacher(store_dir, tmp_path / "all", TeacherConfig(**base, query_batch=rows), progress=False)
    one, every = TeacherStore(tmp_path / "one"), TeacherStore(tmp_path / "all")
    assert len(one.shards) == len(every.shards) == len(KeyStore(store_dir).shards) > 1
    for a, b in zip(one.shards, every.shards):  # the same distribution per row (equal-mass tokens in any order)
        assert a["ids"].shape == b["ids"].shape
        width = int(max(np.max(a["ids"]), np.max(b["ids"]))) + 1
        np.testing.assert_allclose(_dense(a, width), _dense(b, width), atol=2e-3)


def _dense(shard, width: int) -> np.ndarray:
    """A teacher shard's sparse rows as dense (rows, width) probabilities."""
    ids, probs = np.asarray(shard["ids"]), np.asarray(shard["probs"], dtype=np.float32)
    dense = np.zeros((len(ids), width))
    rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)
    np.add.at(dense, (rows[ids >= 0], ids[ids >= 0]), probs[ids >= 0])
    return dense


def test_exact_search_matches_bruteforce_across_chunks():
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(1000, 8)).astype(np.float16)
    idx = ExactIndex(keys, chunk=128)
    q = rng.normal(size=(5, 8)).astype(np.float32)
    d, i = idx.search(q, 7)
    full = ((keys.astype(np.float32)[None] - q[:, None]) ** 2).sum(-1)
    assert np.array_equal(i, np.argsort(full, 1)[:, :7])
    np.testing.assert_allclose(d, np.sort(full, 1)[:, :7], rtol=1e-4, atol=1e-4)


def test_bf16_scan_returns_exact_distances_of_nearly_the_exact_neighbours():
    rng = np.random.default_rng(2)
    centers = rng.normal(size=(30, 64)).astype(np.float32) * 3
    keys = (centers[rng.integers(0, 30, 3000)] + rng.normal(size=(3000, 64))).astype(np.float16)
    q = keys[:50].astype(np.float32) + 0.05
    de, ie = ExactIndex(keys, chunk=512).search(q, 40)
    db, ib = ExactIndex(keys, chunk=512, precision="bf16", rerank_batch=16).search(q, 40)
    full = ((keys.astype(np.float32)[None] - q[:, None]) ** 2).sum(-1)  # (50, 3000)
    np.testing.assert_allclose(db, np.take_along_axis(full, ib, 1), rtol=1e-4, atol=1e-3)  # exact distances
    assert (np.diff(db, axis=1) >= 0).all()
    assert np.array_equal(ib[:, :10], ie[:, :10])  # the nearest ones are the same
    recall = np.mean([len(set(a) & set(b)) / 40 for a, b in zip(ib, ie)])
    assert recall > 0.97


def test_bf16_teacher_is_close_to_the_fp32_one_and_the_setting_is_recorded(store_dir, tmp_path):
    from mlpmem.teacher import _settings

    exact = TeacherConfig(k=16, temperature=2.0, top_k=4)
    low = TeacherConfig(k=16, temperature=2.0, top_k=4, index=IndexConfig(kind="exact", precision="bf16"))
    build_teacher(store_dir, tmp_path / "t32", exact, progress=False)
    build_teacher(store_dir, tmp_path / "t16", low, progress=False)
    store = KeyStore(store_dir)
    a, b = TeacherStore(tmp_path / "t32", datastore=store), TeacherStore(tmp_path / "t16", datastore=store)
    assert (a.array("ids")[:, 0] == b.array("ids")[:, 0]).mean() > 0.95
    assert np.abs(a.array("probs")[:, 0].astype(np.float32) - b.array("probs")[:, 0]).mean() < 0.02
    assert _settings(store, exact)["index"]["precision"] == "fp32"
    assert _settings(store, low)["index"]["precision"] == "bf16"
    with pytest.raises(ConfigError, match="precision"):
        IndexConfig(precision="fp16")
