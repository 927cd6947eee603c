"""Keystore shards reused from a donor built over a corpus this one is a prefix of (nested corpora)."""

import numpy as np
import pytest

from helpers.corpus import corpus_text
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.pipeline.reuse import KeyDonor, encoded_rows, take_key_shards

KW = dict(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=1,
          with_lm=True)


def reusing(donor, config, docs, out, model, tokenizer):
    """What the datastore stage does with a donor: take its shards, then build the rest."""
    take_key_shards(donor, config, model, tokenizer, docs, out)
    return build_keystore(config, model, tokenizer, docs, out, progress=False)


@pytest.fixture(scope="module")
def nested(tiny_tokenizer, tiny_llama, tmp_path_factory):
    """A donor keystore over 5 documents (its folder, its documents) and the token documents of a prefix: 3 whole
    ones and the 4th cut."""
    docs = tokenize_documents([Document(str(i), t) for i, t in enumerate(corpus_text(5))], tiny_tokenizer)
    folder = tmp_path_factory.mktemp("donor")
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, folder, progress=False)
    return KeyDonor(folder, docs), [*docs[:3], docs[3][: len(docs[3]) // 2]]


def test_prefix_reuses_every_shard_before_the_cut_and_equals_a_fresh_build(nested, tiny_llama, tiny_tokenizer,
                                                                           tmp_path):
    donor, prefix = nested
    manifest = reusing(donor, KeystoreConfig(**KW), prefix, tmp_path / "reused", tiny_llama, tiny_tokenizer)
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, prefix, tmp_path / "fresh", progress=False)
    reused, fresh = KeyStore(tmp_path / "reused"), KeyStore(tmp_path / "fresh")
    for field in ("keys", "values", "lm"):
        assert np.array_equal(reused.array(field), fresh.array(field))
    linked = [s for s in manifest["shards"] if "reused_from" in s]
    encoded = [s for s in manifest["shards"] if "reused_from" not in s]
    assert linked and encoded  # the shards before the cut document are linked, the one holding the cut is not
    assert max(s["index"] for s in linked) < min(s["index"] for s in encoded)
    assert encoded_rows(manifest) == sum(s["rows"] for s in encoded) < manifest["rows"]
    name = linked[0]["files"]["keys"]["name"]
    assert (tmp_path / "reused" / name).stat().st_ino == (donor.path / name).stat().st_ino  # a hard link


def test_the_same_corpus_reuses_everything(nested, tiny_llama, tiny_tokenizer, tmp_path):
    donor, _ = nested
    manifest = reusing(donor, KeystoreConfig(**KW), donor.token_docs, tmp_path / "copy", tiny_llama, tiny_tokenizer)
    assert manifest["complete"] and encoded_rows(manifest) == 0


def test_other_settings_or_other_tokens_are_encoded(nested, tiny_llama, tiny_tokenizer, tmp_path):
    donor, prefix = nested
    other_layer = reusing(donor, KeystoreConfig(**{**KW, "layer": 0}), prefix, tmp_path / "layer", tiny_llama,
                          tiny_tokenizer)
    assert encoded_rows(other_layer) == other_layer["rows"]  # keys of another layer: nothing reused
    changed = [d.copy() for d in prefix]
    changed[0][5] = (changed[0][5] + 1) % len(tiny_tokenizer)  # one token of the first window differs
    manifest = reusing(donor, KeystoreConfig(**KW), changed, tmp_path / "changed", tiny_llama, tiny_tokenizer)
    first = next(s for s in manifest["shards"] if s["index"] == 0)
    assert "reused_from" not in first
    fresh = build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, changed, tmp_path / "changed-fresh",
                           progress=False)
    assert manifest["rows"] == fresh["rows"]
    assert np.array_equal(KeyStore(tmp_path / "changed").array("keys"),
                          KeyStore(tmp_path / "changed-fresh").array("keys"))


def test_a_missing_donor_reuses_nothing(nested, tiny_llama, tiny_tokenizer, tmp_path):
    donor, prefix = nested
    manifest = reusing(KeyDonor(tmp_path / "no-such-store", donor.token_docs), KeystoreConfig(**KW), prefix,
                       tmp_path / "alone", tiny_llama, tiny_tokenizer)
    assert manifest["complete"] and encoded_rows(manifest) == manifest["rows"]
