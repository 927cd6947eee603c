import numpy as np
import pytest
import torch

from helpers.corpus import corpus_text
from helpers.tiny import tiny_backbone
from mlpmem.backbone import KeyHook
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import CorruptArtifact, FingerprintMismatch

KW = dict(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=2)


@pytest.fixture()
def docs(tiny_tokenizer):
    return tokenize_documents([Document(str(i), t) for i, t in enumerate(corpus_text(5))], tiny_tokenizer)


@pytest.mark.parametrize("stride", [12, 24])  # 24 = block_size: windows without overlap
def test_rows_equal_labelled_tokens_and_keys_match_model(docs, tiny_llama, tiny_tokenizer, tmp_path, stride):
    manifest = build_keystore(KeystoreConfig(with_lm=True, **{**KW, "stride": stride}), tiny_llama, tiny_tokenizer,
                              docs, tmp_path / "ds", progress=False)
    store = KeyStore(tmp_path / "ds")
    assert store.num_rows == manifest["rows"] == sum(len(d) - 1 for d in docs)
    assert len(store.shards) > 1
    values = store.array("values")
    assert np.array_equal(values, np.concatenate([d[1:] for d in docs]))
    assert len(store.array("keys")) == len(store.array("lm")) == len(values)
    # the first window of document 0 holds its first 23 targets: compare keys and LM log-probs by hand
    ids = torch.from_numpy(docs[0][:24].astype(np.int64))[None]
    with torch.no_grad(), KeyHook(tiny_llama, -1, "ffn_input") as hook:
        logits = tiny_llama(ids).logits
    np.testing.assert_allclose(store.array("keys")[:23], hook.keys[0, :23].half().numpy(), atol=2e-3)
    lp = torch.log_softmax(logits[0, :23], -1).gather(1, ids[0, 1:, None])[:, 0]
    np.testing.assert_allclose(store.array("lm")[:23], lp.numpy(), atol=1e-5)


@pytest.mark.parametrize("pack", [False, True])
def test_resume_after_kill_is_byte_identical(docs, tiny_llama, tiny_tokenizer, tmp_path, monkeypatch, pack):
    build_keystore(KeystoreConfig(**KW, pack=pack), tiny_llama, tiny_tokenizer, docs, tmp_path / "full", progress=False)
    import mlpmem.datastore as ds

    real, calls = ds._write_shard, []

    def dying_write(*args):
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed after two complete shards
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(ds, "_write_shard", dying_write)
    with pytest.raises(KeyboardInterrupt):
        build_keystore(KeystoreConfig(**KW, pack=pack), tiny_llama, tiny_tokenizer, docs, tmp_path / "part",
                       progress=False)
    monkeypatch.setattr(ds, "_write_shard", real)
    with pytest.raises(CorruptArtifact, match="incomplete"):
        KeyStore(tmp_path / "part")
    build_keystore(KeystoreConfig(**KW, pack=pack), tiny_llama, tiny_tokenizer, docs, tmp_path / "part", progress=False)
    full = sorted(p.name for p in (tmp_path / "full").glob("*.npy"))
    assert full == sorted(p.name for p in (tmp_path / "part").glob("*.npy"))
    for name in full:
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "part" / name).read_bytes()


def test_bf16_store_is_close_to_fp32_and_records_precision(docs, tiny_llama, tiny_tokenizer, tmp_path):
    build_keystore(KeystoreConfig(with_lm=True, **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "fp32",
                   progress=False)
    build_keystore(KeystoreConfig(with_lm=True, precision="bf16", **KW), tiny_llama, tiny_tokenizer, docs,
                   tmp_path / "bf16", progress=False)
    ref, low = KeyStore(tmp_path / "fp32"), KeyStore(tmp_path / "bf16")
    assert low.manifest["precision"] == "bf16" and ref.manifest["precision"] == "fp32"
    assert np.array_equal(ref.array("values"), low.array("values"))
    keys_ref, keys_low = ref.array("keys").astype(np.float32), low.array("keys").astype(np.float32)
    rel = np.linalg.norm(keys_low - keys_ref) / np.linalg.norm(keys_ref)
    assert 0 < rel < 0.02  # bf16 really ran (not bit-equal) and stays close
    np.testing.assert_allclose(low.array("lm"), ref.array("lm"), atol=0.05)
    with pytest.raises(CorruptArtifact, match="precision"):  # a resumed store never mixes precisions
        build_keystore(KeystoreConfig(with_lm=True, precision="bf16", **KW), tiny_llama, tiny_tokenizer, docs,
                       tmp_path / "fp32", progress=False)


def test_auto_precision_store_records_what_ran(docs, tiny_llama, tiny_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr("mlpmem.compute.cpu_has_native_bf16", lambda: False)
    build_keystore(KeystoreConfig(precision="auto", **KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "auto",
                   progress=False)
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "fp32", progress=False)
    assert KeyStore(tmp_path / "auto").manifest["precision"] == "fp32"
    assert np.array_equal(KeyStore(tmp_path / "auto").array("keys"), KeyStore(tmp_path / "fp32").array("keys"))


def test_rerun_of_complete_store_does_nothing(docs, tiny_llama, tiny_tokenizer, tmp_path):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "ds").iterdir()}
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    assert before == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "ds").iterdir()}


def test_changed_settings_refuse_to_mix(docs, tiny_llama, tiny_tokenizer, tmp_path):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    with pytest.raises(CorruptArtifact, match="stride"):
        build_keystore(KeystoreConfig(**dict(KW, stride=8)), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds",
                       progress=False)


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "delete"])
def test_corrupted_shard_is_detected(docs, tiny_llama, tiny_tokenizer, tmp_path, damage):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    shard = tmp_path / "ds" / "keys-00001.npy"
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "bitflip":
        data[-7] ^= 0x10
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()
    with pytest.raises(CorruptArtifact, match="keys-00001.npy"):
        KeyStore(tmp_path / "ds")


def test_other_backbone_is_rejected(docs, tiny_llama, tiny_tokenizer, tmp_path):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    with pytest.raises(FingerprintMismatch, match="differs in weights_sha"):
        other = tiny_backbone("llama", seed=5, vocab_size=len(tiny_tokenizer), preset="bpe")
        KeyStore(tmp_path / "ds").check_backbone(other, tiny_tokenizer)


def test_nan_keys_are_an_error(docs, tiny_tokenizer, tmp_path):
    model = tiny_backbone("llama", vocab_size=len(tiny_tokenizer), preset="bpe")
    with torch.no_grad():
        model.model.layers[2].post_attention_layernorm.weight.fill_(float("nan"))
    with pytest.raises(CorruptArtifact, match="NaN"):
        build_keystore(KeystoreConfig(**KW), model, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    assert not list((tmp_path / "ds").glob("keys-*.npy"))


def test_shard_with_fields_of_different_lengths_is_rejected(docs, tiny_llama, tiny_tokenizer, tmp_path):
    """A consistently checksummed shard whose keys and values disagree in length (what a window whose first
    target had no context inside it used to produce) is refused when opened."""
    import json

    from mlpmem.utils.shards import save_array

    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    manifest_path = tmp_path / "ds" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    keys = np.load(tmp_path / "ds" / "keys-00001.npy")
    manifest["shards"][1]["files"]["keys"] = save_array(tmp_path / "ds", "keys-00001.npy", keys[:-3])
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptArtifact, match="shard 1 does not hold"):
        KeyStore(tmp_path / "ds")
