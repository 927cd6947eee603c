"""Documents of a run: their ids (a hash of the text), the new ones a user brings, and what the run holds.

A document's id is the first 16 hex digits of the sha256 of its text, so the same text always has the same id
and an update can tell a document the run already holds (it is skipped and counted). A document may also carry
a name (the ``id`` field of a JSONL record, a shipped corpus's title): ``forget`` takes either.

:class:`Holdings` lists every document whose positions are in the datastore, in datastore order: document ``j``
of ``n_j`` tokens (its document-start token first) holds ``n_j - 1`` consecutive rows, the targets its windows
score exactly once (:func:`mlpmem.corpora.documents.make_windows`). So the rows of each document, and the
document of each datastore row, follow from the token counts alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem.corpora.documents import Document, iter_documents, iter_jsonl
from mlpmem.corpora.tokens import open_tokens
from mlpmem.errors import CorpusError, MlpmemError
from mlpmem.utils.shards import MANIFEST, read_json

SNIPPET = 160
"""Characters of each document kept in the run's list (what ``explain`` shows)."""


def doc_id(text: str) -> str:
    """The id of a document: sha256 of its UTF-8 text, 16 hex digits."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class NewDocument:
    id: str
    name: str
    text: str
    named: bool = True
    """The name was given by the user (else it is the file's ``stem:line``)."""


def read_new_documents(path: str | Path) -> list[NewDocument]:
    """The documents of ``path``: a ``.jsonl`` file (one record a line, ``text`` and an optional ``id``, used as
    the name) or a text file (one document a line); blank lines are skipped. A record with a blank text, one name
    given to two texts or one text given two names is refused: each document is taken as given, or not at all (a
    record repeated whole is one document, skipped and counted by the update)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"documents file {path} not found (a .jsonl of {{'text', 'id'}} or a text file, "
                          "one document a line)")
    if path.suffix == ".jsonl":
        docs = list(iter_jsonl(path))
    else:
        lines = text_lines(path)
        docs = [Document(f"{path.stem}:{n}", line) for n, line in lines]
    new = [NewDocument(doc_id(d.text), d.id, d.text, not re.fullmatch(rf"{re.escape(path.stem)}:\d+", d.id))
           for d in docs]
    check_given_once(new, path)
    return new


def check_given_once(docs: list[NewDocument], path: Path) -> None:
    """Refuse, in one file, a blank document, a name given to two texts, or a text given two names by the user."""
    names: dict[str, NewDocument] = {}
    texts: dict[str, NewDocument] = {}
    for doc in docs:
        if not doc.text.strip():
            raise CorpusError(f"{path}: document {doc.name!r} has a blank text: give its text or remove it")
        if names.setdefault(doc.name, doc).id != doc.id:
            raise CorpusError(f"{path}: the name {doc.name!r} is given to two texts: give each its own name")
        first = texts.setdefault(doc.id, doc)
        if first.name != doc.name and (first.named or doc.named):
            raise CorpusError(f"{path}: documents {first.name!r} and {doc.name!r} have the same text: give it once")


def check_new_names(fresh: list[NewDocument], held: Holdings) -> None:
    """Refuse a new document the user named as a document the run holds (an id or a name): ``forget`` would take
    both."""
    taken = held.keys()
    clash = [d for d in fresh if d.named and d.name in taken]
    if clash:
        raise MlpmemError(f"the new document {clash[0].name!r} has the name or id of a document the run holds (another "
                          "text): give it another name")


def text_lines(path: Path) -> list[tuple[int, str]]:
    """``(line number, stripped line)`` of every non-blank line of a UTF-8 text file (one-line error if not UTF-8)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path} is not UTF-8 (invalid byte at offset {exc.start})") from None
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def entry(doc: NewDocument, tokens: int, added: int, text_file: str | None = None) -> dict:
    """One document of a run's list: id, name, token count, the operation that added it (0: the run's corpus),
    a snippet, and where its text is kept (documents added by an update; a corpus document records instead its
    index in the tokenized training split, ``base``)."""
    out = {"id": doc.id, "name": doc.name, "tokens": int(tokens), "added": int(added), "snippet": doc.text[:SNIPPET]}
    if text_file is not None:
        out["text"] = text_file
    return out


class Holdings:
    """The documents whose positions the datastore holds, in datastore order (see the module docstring)."""

    def __init__(self, documents: list[dict]):
        self.documents = documents
        rows = np.array([d["tokens"] - 1 for d in documents], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(rows)])  # document j holds rows offsets[j]:offsets[j+1]

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    def rows_of(self, j: int) -> range:
        return range(int(self.offsets[j]), int(self.offsets[j + 1]))

    def document_of(self, rows: np.ndarray) -> np.ndarray:
        """The document index of each datastore row (any shape; ``-1`` for a ``-1`` row)."""
        rows = np.asarray(rows)
        out = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.where(rows >= 0, out, -1)

    def ids(self) -> set[str]:
        return {d["id"] for d in self.documents}

    def keys(self) -> set[str]:
        """Every id and name a document held can be given by."""
        return self.ids() | {d["name"] for d in self.documents}

    def find(self, wanted: list[str]) -> list[int]:
        """The indices of the documents named by ``wanted`` (ids or names; every document of that id or name);
        an unknown one is a one-line error."""
        by_key: dict[str, list[int]] = {}
        for j, d in enumerate(self.documents):
            by_key.setdefault(d["id"], []).append(j)
            if d["name"] != d["id"]:
                by_key.setdefault(d["name"], []).append(j)
        unknown = [w for w in wanted if w not in by_key]
        if unknown:
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise MlpmemError(f"no document {unknown[0]!r}{more} in the run: give ids or names of documents it "
                              "holds (`mlpmem explain` shows them)")
        return sorted({j for w in wanted for j in by_key[w]})


def corpus_documents(tokens_folder: Path, num_rows: int, fallback: Path | None = None) -> list[dict]:
    """The list of a run that no operation has changed yet: the training split's documents (their texts from the
    split file its tokens were made from, or ``fallback`` when that path is gone, e.g. the run folder moved; their
    lengths from the tokens), checked against the datastore's rows."""
    manifest = read_json(tokens_folder / MANIFEST, f"tokenized split {tokens_folder}")
    source = Path(manifest["source"][0][0]) if manifest.get("source") else None
    if (source is None or not source.is_file()) and fallback is not None and fallback.is_file():
        source = fallback
    if source is None or not source.is_file():
        where = (f" (a path relative to the directory the run was built from, not {Path.cwd()}: run mlpmem there)"
                 if source is not None and not source.is_absolute() else "")
        raise MlpmemError(f"cannot name the run's documents: the training split file {source} its tokens were "
                          f"made from is gone{where}")
    lengths = open_tokens(tokens_folder, verify=False).lengths
    docs = []
    for i, (doc, n) in enumerate(zip(iter_documents(source), lengths)):
        docs.append({**entry(NewDocument(doc_id(doc.text), doc.id, doc.text), int(n), 0), "base": i})
    if len(docs) != len(lengths) or int(np.sum(lengths - 1)) != num_rows:
        raise MlpmemError(f"the run's training split ({source}) no longer matches its datastore "
                          f"({num_rows} rows): the datastore was built from another corpus")
    return docs


def texts_of(folder: Path, text_file: str) -> dict[str, str]:
    """``{id: text}`` of a file of added documents (JSONL of ``{"id", "text"}``) kept by the run."""
    path = folder / text_file
    if not path.is_file():
        raise MlpmemError(f"the texts of the documents added to the run are missing ({path})")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"]: r["text"] for r in rows}
