"""Packed key extraction: several short windows per row give the keys, rows and order of one window per row.

Tolerances: packed and separate fp32 states agree to 1e-5 (only the summation order of other matrix shapes
differs); stored keys are fp16, so they agree with an fp32 reference to fp16 rounding (relative 2^-11).
"""

import json

import numpy as np
import pytest
import torch

from helpers.tiny import TinyTokenizer
from memory_mosaics.config import MosaicsConfig
from memory_mosaics.model import MosaicsForCausalLM
from mlpmem.backbone import extract_keys
from mlpmem.corpora.documents import Window, make_windows
from mlpmem.datastore import (
    KeyStore,
    KeystoreConfig,
    _scored_states,
    build_keystore,
    encode_windows,
    packing_check,
)
from mlpmem.errors import CorruptArtifact

BLOCK, STRIDE = 24, 12
KW = dict(layer=-1, site="ffn_input", block_size=BLOCK, stride=STRIDE, batch_size=2, batches_per_shard=2)
LENGTHS = (6, 9, 60, 4, 13, 7, 30, 5, 11, 3, 8, 40, 6)
"""Short documents (several fit one row) mixed with long ones (sliding windows, a short tail window)."""


def mixed_docs(vocab: int, lengths=LENGTHS, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.concatenate([[0], rng.integers(3, vocab, size=n - 1)]).astype(np.int32) for n in lengths]


@pytest.fixture(params=["llama-sdpa", "llama-eager", "gpt2-sdpa", "gpt2-eager"])
def backbone(request, tiny_llama, tiny_gpt2):
    family, impl = request.param.split("-")
    model = tiny_llama if family == "llama" else tiny_gpt2
    before = model.config._attn_implementation
    model.set_attn_implementation(impl)
    yield model
    model.set_attn_implementation(before)


def alone_keys(model, docs, windows, layer=-1) -> np.ndarray:
    """fp32 keys of every scored target, each window run alone in its own row (no padding)."""
    out = []
    for w in windows:
        ids = torch.from_numpy(docs[w.doc][w.start : w.end].astype(np.int64))[None]  # (1, n)
        out.append(extract_keys(model, ids, None, layer, "ffn_input")[0, w.positions])
    return torch.cat(out).numpy()


def test_packed_keys_equal_keys_alone(backbone, tiny_tokenizer):
    docs = mixed_docs(len(tiny_tokenizer))
    windows = list(make_windows([len(d) for d in docs], BLOCK, STRIDE))
    assert packing_check(backbone, 2, "ffn_input") is None
    with torch.no_grad():
        packed, _ = _scored_states(backbone, docs, windows, 2, "ffn_input", False, BLOCK)
        separate, _ = _scored_states(backbone, docs, windows, 2, "ffn_input", False, None)
    np.testing.assert_allclose(packed.numpy(), separate.numpy(), rtol=1e-5, atol=1e-5)
    reference = alone_keys(backbone, docs, windows, layer=2)
    np.testing.assert_allclose(packed.numpy(), reference, rtol=1e-5, atol=1e-5)
    stored = encode_windows(backbone, docs, windows, 2, "ffn_input", False, pack_into=BLOCK).keys
    np.testing.assert_allclose(stored.astype(np.float32), reference, rtol=2**-11, atol=1e-4)


def test_a_key_never_sees_another_documents_tokens(backbone, tiny_tokenizer):
    """Three documents in one row: changing the tokens of both neighbours leaves the middle one's keys as
    they were (and GPT-2's absolute positions restart, or its keys would differ from the keys alone)."""
    docs = mixed_docs(len(tiny_tokenizer), lengths=(7, 6, 8))
    windows = [Window(i, 0, len(d), 1) for i, d in enumerate(docs)]
    middle = slice(6, 11)  # the scored positions of document 1, after document 0's 6
    with torch.no_grad():
        before, _ = _scored_states(backbone, docs, windows, -1, "ffn_input", False, BLOCK)
        changed = [mixed_docs(len(tiny_tokenizer), (7,), seed=1)[0], docs[1], mixed_docs(len(tiny_tokenizer), (8,),
                                                                                            seed=2)[0]]
        after, _ = _scored_states(backbone, changed, windows, -1, "ffn_input", False, BLOCK)
    assert not torch.allclose(before[:6], after[:6])  # the neighbours did change
    torch.testing.assert_close(after[middle], before[middle], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after[middle].numpy(), alone_keys(backbone, docs, windows[1:2]), rtol=1e-5,
                               atol=1e-5)


def test_keystore_rows_order_and_count_equal_unpacked(tiny_llama, tiny_tokenizer, tmp_path, monkeypatch):
    import mlpmem.datastore as ds

    docs = mixed_docs(len(tiny_tokenizer))
    forwards = {}
    real = ds.encode_windows

    def counting(*args, **kw):
        key = args[-1] is not None if len(args) > 7 else kw.get("pack_into") is not None
        forwards[key] = forwards.get(key, 0) + 1
        return real(*args, **kw)

    monkeypatch.setattr(ds, "encode_windows", counting)
    unpacked = build_keystore(KeystoreConfig(with_lm=True, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "one",
                              progress=False)
    packed = build_keystore(KeystoreConfig(with_lm=True, pack=True, **KW), tiny_llama, tiny_tokenizer, docs,
                            tmp_path / "packed", progress=False)
    assert unpacked["pack"] is False and packed["pack"] is True and packed["pack_fallback"] is None
    assert forwards[True] < forwards[False]  # packing really ran fewer, fuller forwards
    for key in ("rows", "num_windows", "num_targets"):
        assert packed[key] == unpacked[key]
    assert [s["rows"] for s in packed["shards"]] == [s["rows"] for s in unpacked["shards"]]
    one, two = KeyStore(tmp_path / "one"), KeyStore(tmp_path / "packed")
    values = np.concatenate([d[1:] for d in docs])
    assert np.array_equal(one.array("values"), values) and np.array_equal(two.array("values"), values)
    windows = make_windows([len(d) for d in docs], BLOCK, STRIDE)
    reference = alone_keys(tiny_llama, docs, windows)
    for store in (one, two):  # long documents' windows and short documents alike
        np.testing.assert_allclose(store.array("keys").astype(np.float32), reference, rtol=2**-11, atol=1e-4)
    np.testing.assert_allclose(two.array("lm"), one.array("lm"), atol=1e-5)


def test_packed_store_is_not_reused_the_other_way(tiny_llama, tiny_tokenizer, tmp_path):
    docs = mixed_docs(len(tiny_tokenizer))
    build_keystore(KeystoreConfig(pack=True, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    with pytest.raises(CorruptArtifact, match="pack=True, but the configuration now gives pack=False"):
        build_keystore(KeystoreConfig(pack=False, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds",
                       progress=False)
    build_keystore(KeystoreConfig(pack=False, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "one", progress=False)
    with pytest.raises(CorruptArtifact, match="pack=False, but the configuration now gives pack=True"):
        build_keystore(KeystoreConfig(pack=True, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "one",
                       progress=False)


def test_store_that_records_no_pack_is_refused_until_rebuilt(tiny_llama, tiny_tokenizer, tmp_path):
    """A manifest that lacks a setting (written before it was recorded) is reused neither way: one line that says to
    rebuild it, and ``--rebuild`` does."""
    docs = mixed_docs(len(tiny_tokenizer))
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    path = tmp_path / "ds" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["pack"]
    path.write_text(json.dumps(manifest))
    for pack in (False, True):
        with pytest.raises(CorruptArtifact, match=r"records no pack: rebuild it \(--rebuild\)") as exc:
            build_keystore(KeystoreConfig(pack=pack, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds",
                           progress=False)
        assert "\n" not in str(exc.value)
    assert build_keystore(KeystoreConfig(pack=True, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds",
                          rebuild=True, progress=False)["pack"]


def test_backbone_without_position_ids_falls_back_to_one_window_per_row(tmp_path):
    torch.manual_seed(0)
    model = MosaicsForCausalLM(MosaicsConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=32, short_window=4,
                                             long_gap_min=2, long_gap_max=4, long_gap_eval=2, scan_chunk=4)).eval()
    docs = mixed_docs(40)
    with pytest.warns(UserWarning, match="one window per row.*position_ids"):
        packed = build_keystore(KeystoreConfig(pack=True, **KW), model, TinyTokenizer(40), docs, tmp_path / "p",
                                progress=False)
    build_keystore(KeystoreConfig(**KW), model, TinyTokenizer(40), docs, tmp_path / "u", progress=False)
    assert packed["pack"] is False and "position_ids" in packed["pack_fallback"]
    np.testing.assert_array_equal(KeyStore(tmp_path / "p").array("keys"), KeyStore(tmp_path / "u").array("keys"))


def test_probe_refuses_a_model_whose_packed_documents_leak(tiny_llama, monkeypatch):
    """A mask that lets a document see the one before it (plain causal over the row) fails the probe."""
    import mlpmem.datastore as ds

    def causal_only(model, segments):
        T = segments.shape[1]
        return torch.ones(T, T, dtype=torch.bool).tril().expand(len(segments), 1, T, T)

    assert packing_check(tiny_llama, -1, "ffn_input") is None
    monkeypatch.setattr(ds, "document_mask", causal_only)
    assert "does not keep packed documents apart" in packing_check(tiny_llama, -1, "ffn_input")
