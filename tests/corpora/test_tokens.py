"""Tokenized splits on disk: same tokens as in-memory tokenization, caps, reuse, integrity, atomicity."""

import json

import numpy as np
import pytest

from helpers.corpus import corpus_text
from mlpmem.corpora import documents as corpus
from mlpmem.corpora.documents import (
    Document,
    corpus_hash,
    iter_documents,
    tokenize_documents,
)
from mlpmem.corpora.tokens import is_current, open_tokens, write_tokens
from mlpmem.errors import ConfigError, CorruptArtifact

SETTINGS = {"source": "test"}


def documents(n=8):
    return [Document(str(i), t) for i, t in enumerate(corpus_text(n))]


def test_stream_equals_in_memory_tokenization_in_any_batching(tiny_tokenizer, tmp_path, monkeypatch):
    expected = tokenize_documents(documents(), tiny_tokenizer)
    monkeypatch.setattr(corpus, "BATCH_CHARS", 100)  # several tokenizer calls, documents split across none
    docs = write_tokens(iter(documents()), tiny_tokenizer, tmp_path / "tok", SETTINGS, progress=False)
    assert len(docs) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(docs, expected))
    assert corpus_hash(docs) == corpus_hash(expected)
    assert isinstance(docs.tokens, np.memmap) and docs.tokens.dtype == np.int32
    assert list(docs.lengths) == [len(a) for a in expected]
    assert np.load(tmp_path / "tok" / "tokens.npy").tolist() == np.concatenate(expected).tolist()  # a plain .npy


def capped(token_docs, cap):
    """The cap's meaning, written plainly: whole documents in order, the last cut, pieces under 2 tokens dropped."""
    kept, total = [], 0
    for arr in token_docs:
        kept.append(arr[: cap - total])
        total += len(kept[-1])
        if total >= cap:
            break
    return [a for a in kept if len(a) >= 2]


@pytest.mark.parametrize("cap", [2, 3, "first-1", "first", "first+1", "first+2", 10**6])
def test_cap_takes_whole_documents_in_order_and_cuts_the_last(tiny_tokenizer, tmp_path, cap):
    full = tokenize_documents(documents(), tiny_tokenizer)
    if isinstance(cap, str):  # around the end of the first document (a 1-token remainder has no target)
        cap = len(full[0]) + int(cap.removeprefix("first") or 0)
    docs = write_tokens(documents(), tiny_tokenizer, tmp_path / "tok", SETTINGS, cap=cap, progress=False)
    expected = capped(full, cap)
    assert len(docs) == len(expected) and all(np.array_equal(a, b) for a, b in zip(docs, expected))


def test_reuse_and_staleness(tiny_tokenizer, tmp_path):
    folder = tmp_path / "tok"
    assert not is_current(folder, SETTINGS)
    write_tokens(documents(), tiny_tokenizer, folder, SETTINGS, progress=False)
    assert is_current(folder, SETTINGS) and not is_current(folder, {"source": "other"})
    write_tokens(documents(3), tiny_tokenizer, folder, {"source": "other"}, progress=False)  # replaces it
    assert len(open_tokens(folder)) == 3 and is_current(folder, {"source": "other"})
    (folder / "notes.txt").write_text("mine")  # a stale cache holding a user's file is refused, the file kept
    with pytest.raises(ConfigError, match="notes.txt"):
        write_tokens(documents(), tiny_tokenizer, folder, SETTINGS, progress=False)
    assert (folder / "notes.txt").read_text() == "mine" and not list(tmp_path.glob("tok.tmp-*"))


def test_bit_flip_and_bad_offsets_are_detected(tiny_tokenizer, tmp_path):
    folder = tmp_path / "tok"
    write_tokens(documents(), tiny_tokenizer, folder, SETTINGS, progress=False)
    raw = bytearray((folder / "tokens.npy").read_bytes())
    raw[200] ^= 1
    (folder / "tokens.npy").write_bytes(bytes(raw))
    with pytest.raises(CorruptArtifact, match="checksum"):
        open_tokens(folder)
    write_tokens(documents(), tiny_tokenizer, folder, {"source": "again"}, progress=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    np.save(folder / "offsets.npy", np.array([0, 1, manifest["tokens"]]))
    with pytest.raises(CorruptArtifact, match="offsets"):
        open_tokens(folder, verify=False)


def test_an_interrupted_build_leaves_the_previous_split_intact(tiny_tokenizer, tmp_path):
    folder = tmp_path / "tok"
    write_tokens(documents(), tiny_tokenizer, folder, SETTINGS, progress=False)

    def failing():
        yield from documents(3)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_tokens(failing(), tiny_tokenizer, folder, {"source": "new"}, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no temporary folder left
    assert is_current(folder, SETTINGS) and len(open_tokens(folder)) == 8
    (tmp_path / "tok.tmp-99999").mkdir()  # what a SIGKILL mid-build leaves: cleared by the next build
    write_tokens(documents(2), tiny_tokenizer, folder, {"source": "new"}, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"] and len(open_tokens(folder)) == 2


def test_jsonl_is_read_one_line_at_a_time(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    docs = iter_documents(path)
    assert next(docs).text == "fine"  # the bad line further down is not read yet
    with pytest.raises(Exception, match=r"c.jsonl:2 is not UTF-8"):
        next(docs)
