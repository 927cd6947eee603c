import json

import numpy as np
import pytest

from mlpmem.corpora.documents import (
    make_windows,
    read_documents,
    tokenize_documents,
)
from mlpmem.errors import CorpusError


@pytest.mark.parametrize("n,block,stride", [(1, 8, 4), (2, 8, 4), (8, 8, 4), (9, 8, 4), (50, 8, 4), (50, 8, 8),
                                            (50, 8, 3), (17, 16, 16)])
def test_windows_score_each_target_once_with_enough_context(n, block, stride):
    windows = make_windows([n], block, stride)
    scored = [t for w in windows for t in range(w.first_target, w.end)]
    assert scored == list(range(1, n))
    for w in windows:
        assert w.end - w.start <= block
        assert w.positions.start >= 0  # the key predicting the first target lies inside the window
        if w.start > 0:  # every later window leaves >= block - stride tokens of context (>= 1)
            assert w.first_target - w.start >= max(block - stride, 1)
    assert sum(w.num_scored for w in windows) == max(n - 1, 0)


def test_read_txt_jsonl_and_folder(tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "one"}) + "\n\n" + json.dumps({"id": "x", "text": "two"}))
    docs = read_documents(tmp_path)
    assert [d.text for d in docs] == ["hello world", "one", "two"]
    assert docs[2].id == "x"


@pytest.mark.parametrize("content,match", [
    (b"", "empty"), (b"  \n\n ", "empty"), (b"\xff\xfe\xfa bad", "not UTF-8"), (b"\x00\x01\x02\x03", "binary")])
def test_bad_corpora(tmp_path, content, match):
    path = tmp_path / "c.txt"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=match):
        read_documents(path)


def test_bad_jsonl_and_missing(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"title": "no text"}\n')
    with pytest.raises(CorpusError, match="no string field 'text'"):
        read_documents(tmp_path / "c.jsonl")
    with pytest.raises(CorpusError, match="does not exist"):
        read_documents(tmp_path / "missing.txt")


def test_tokenize_prepends_document_token(tiny_tokenizer):
    from mlpmem.corpora.documents import Document

    arrays = tokenize_documents([Document("a", "The keeper.")], tiny_tokenizer)
    assert arrays[0].dtype == np.int32
    assert arrays[0][0] == tiny_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert tiny_tokenizer.decode(arrays[0][1:].tolist()) == "The keeper."


def test_blank_documents_are_skipped_and_counted(tmp_path, capsys):
    from mlpmem.corpora.documents import read_documents

    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n{"text": "  "}\n{"text": ""}\n{"text": "two"}\n')
    (tmp_path / "b.txt").write_text("\n \n")
    assert [d.text for d in read_documents(tmp_path)] == ["one", "two"]
    notes = capsys.readouterr().err.splitlines()
    assert notes == [f"note: skipped 2 blank documents of {tmp_path / 'a.jsonl'}",
                     f"note: skipped 1 blank document of {tmp_path / 'b.txt'}"]
