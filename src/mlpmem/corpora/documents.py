"""Corpus: documents from text / JSONL / folders, tokenized into sliding windows.

Windows follow the standard strided evaluation: a document of n tokens is cut into windows
``tokens[s:s+block]`` with ``s = 0, stride, 2*stride, ...``; the first window scores every target,
each later window scores only the targets not scored before (the last ``stride`` ones), so each
scored token sees at least ``block - stride`` tokens of context. The datastore and every
evaluation use the same windows, so a token has the same context in both.
"""

from __future__ import annotations

import hashlib
import json
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem.errors import CorpusError

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Document:
    id: str
    text: str


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise CorpusError(f"{path} looks binary (NUL bytes), not a UTF-8 text corpus")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path} is not UTF-8 (invalid byte at offset {exc.start})") from None


def iter_jsonl(path: Path):
    """Documents of a JSONL file, read one line at a time (the file is never held whole)."""
    with path.open("rb") as f:
        if b"\x00" in f.read(8192):
            raise CorpusError(f"{path} looks binary (NUL bytes), not a UTF-8 text corpus")
        f.seek(0)
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{path}:{lineno} is not UTF-8 (invalid byte at column {exc.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise CorpusError(f"{path}:{lineno} is not valid JSON") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise CorpusError(f"{path}:{lineno} has no string field 'text'")
            if "id" in obj and not (isinstance(obj["id"], str) and obj["id"].strip()):
                raise CorpusError(f"{path}:{lineno}: field 'id' must be a non-empty string (a document's name), got "
                                  f"{obj['id']!r}: write it as a string, or leave it out")
            yield Document(obj.get("id", f"{path.stem}:{lineno}"), obj["text"])


def iter_documents(path: str | Path):
    """Non-blank documents of a ``.txt`` file (one document), a ``.jsonl`` file (field ``text``) or a folder of
    them, one at a time: memory is bounded by the largest document, not by the corpus. Blank documents are skipped
    and counted in a note on stderr, file by file."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"corpus path {path} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl") and p.is_file())
    else:
        files = [path]
    for file in files:
        docs = iter_jsonl(file) if file.suffix == ".jsonl" else [Document(file.stem, _read_text(file))]
        blank = 0
        for doc in docs:
            if doc.text.strip():
                yield doc
            else:
                blank += 1
        if blank:
            print(f"note: skipped {blank} blank document{'s' * (blank > 1)} of {file}", file=sys.stderr)


def read_documents(path: str | Path) -> list[Document]:
    """All documents of :func:`iter_documents` in a list (an error if there is none)."""
    docs = list(iter_documents(path))
    if not docs:
        raise CorpusError(f"corpus {path} is empty (no non-blank document)")
    return docs


def split_files(path: str | Path) -> dict[str, Path]:
    """The split files of a prepared corpus folder (``train.jsonl``, ``validation.jsonl``, ``test.jsonl``)."""
    path = Path(path)
    files = {s: path / f"{s}.jsonl" for s in SPLITS}
    missing = [s for s, f in files.items() if not f.is_file()]
    if missing:
        raise CorpusError(f"corpus folder {path} lacks split file(s) {', '.join(m + '.jsonl' for m in missing)}")
    return files


def doc_start_token(tokenizer) -> int:
    """The token put before each document, so its first real token is predicted too."""
    vocab = tokenizer.get_vocab()
    for tok in ("<|endoftext|>", tokenizer.bos_token, tokenizer.eos_token):
        if tok is not None and tok in vocab:
            return vocab[tok]
    raise CorpusError("the tokenizer has no document-separator, BOS or EOS token")


BATCH_CHARS = 1 << 20
"""Characters of text sent to the tokenizer at once (a batch of documents, or one longer document)."""


def encode_documents(docs, tokenizer):
    """``[doc_start, tokens...]`` (int32) of each document of the iterable ``docs``, in order, one at a time;
    the tokenizer gets about ``BATCH_CHARS`` of text per call."""
    start = doc_start_token(tokenizer)
    batch, chars = [], 0
    for doc in docs:
        batch.append(doc.text)
        chars += len(doc.text)
        if chars >= BATCH_CHARS:
            yield from (np.asarray([start, *ids], dtype=np.int32) for ids in _token_ids(tokenizer, batch))
            batch, chars = [], 0
    if batch:
        yield from (np.asarray([start, *ids], dtype=np.int32) for ids in _token_ids(tokenizer, batch))


def _token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def tokenize_documents(docs: list[Document], tokenizer) -> list[np.ndarray]:
    """One int32 array per document: ``[doc_start, tokens...]``."""
    return list(encode_documents(docs, tokenizer))


@dataclass(frozen=True)
class Window:
    """One model input ``doc[start:end]`` scoring targets ``doc[first_target:end]``."""

    doc: int
    start: int
    end: int
    first_target: int

    @property
    def positions(self) -> slice:
        """Positions within the window whose next token is a scored target."""
        return slice(self.first_target - self.start - 1, self.end - self.start - 1)

    @property
    def num_scored(self) -> int:
        return self.end - self.first_target


class Windows(Sequence):
    """A compact, read-only sequence of :class:`Window` (one int64 row ``doc, start, end, first_target`` each):
    a billion-token corpus has millions of windows, too many for Python objects."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows.reshape(-1, 4)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Windows(self.rows[idx])
        return Window(*(int(v) for v in self.rows[idx]))

    @property
    def num_scored(self) -> int:
        return int((self.rows[:, 2] - self.rows[:, 3]).sum())


def make_windows(doc_lengths, block_size: int, stride: int) -> Windows:
    """Sliding windows over every document; each target (token index >= 1) is scored exactly once.

    A window's first target always has at least one token of context inside the window: with
    ``stride == block_size`` consecutive windows overlap by one token (the last scored token of one window
    is the input that predicts the first target of the next).
    """
    rows = array("q")
    for d, n in enumerate(doc_lengths):
        scored_until = 1  # token 0 (the document-start token) is never a target
        start = 0
        while scored_until < n:
            end = min(start + block_size, n)
            rows.extend((d, start, end, scored_until))
            scored_until = end
            start = min(start + stride, scored_until - 1)
    return Windows(np.frombuffer(rows, dtype=np.int64) if rows else np.zeros((0, 4), dtype=np.int64))


def document_lengths(token_docs) -> list[int] | np.ndarray:
    """Token count of each document (read from the offsets of a memory-mapped split, without touching tokens)."""
    lengths = getattr(token_docs, "lengths", None)
    return lengths if lengths is not None else [len(t) for t in token_docs]


def corpus_hash(token_docs) -> str:
    h = hashlib.sha256()
    for arr in token_docs:
        h.update(len(arr).to_bytes(8, "little"))
        h.update(arr.tobytes())
    release_pages(token_docs)
    return h.hexdigest()[:16]


def release_pages(token_docs) -> None:
    """Let a memory-mapped split (:class:`mlpmem.corpora.tokens.TokenDocs`) drop the pages read so far (lists:
    nothing)."""
    if hasattr(token_docs, "release"):
        token_docs.release()
