"""The prepared-corpus folder: three JSONL splits and a ``meta.json``, written atomically, checked by sha256.

Every prepared corpus is a folder with ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` (one JSON
object per line: ``{"id": str, "title": str, "text": str}``) and a ``meta.json`` that records the corpus
name, setting, seed, every option, the source package and version (and the sha256 of the source file),
the documents of each split (id, title, characters), the character count and sha256 of each split file,
and a human-readable ``description`` of how the split was made. The folder is written under a temporary
name next to it and renamed at the end, so a reader never sees half a corpus; preparing a corpus again
with the same settings returns the existing folder untouched (after checking the sha256 of its split
files), while other settings replace it.

Seeded orders use sha256 of ``f"{seed}:{id}"`` rather than a random generator, so they do not depend on
the Python or numpy version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

from mlpmem.corpora.documents import SPLITS
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.utils.shards import sha256_file

FORMAT_VERSION = 1


def seeded_order(keys: Iterable[str], seed: int) -> list[str]:
    """``keys`` sorted by ``sha256(f"{seed}:{key}")``: a fixed shuffle that no library version changes."""
    return sorted(keys, key=lambda key: (hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), key))


def article_id(doc_id: str) -> str:
    """The article (or play) a document comes from: its id without a ``#head``/``#tail`` suffix."""
    return doc_id.split("#", 1)[0]


def read_split(folder: Path | str, split: str) -> list[dict]:
    """The documents of one split of a prepared corpus."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        raise CorpusError(f"{path} is missing: prepare the corpus first")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_meta(folder: Path) -> dict | None:
    """The ``meta.json`` of a prepared corpus, or None when it is missing or not a JSON object."""
    try:
        with open(folder / "meta.json", encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def is_prepared(folder: Path, settings: dict, source_sha256: str | None) -> bool:
    """Whether ``folder`` holds a complete corpus prepared with ``settings`` (and that source file)."""
    meta = read_meta(folder)
    if meta is None or meta.get("settings") != settings:
        return False
    if source_sha256 is not None and meta.get("source", {}).get("sha256") != source_sha256:
        return False
    splits = meta.get("splits", {})
    for split in SPLITS:
        path = folder / f"{split}.jsonl"
        if not path.is_file() or split not in splits or sha256_file(path) != splits[split].get("sha256"):
            return False
    return True


def check_replaceable(out_dir: Path) -> None:
    """Refuse to overwrite a folder that exists and holds anything but a prepared corpus's own files (its
    ``meta.json`` and the split files it lists): the folder is replaced whole."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ConfigError(f"output folder {out_dir} exists and is not a folder")
    meta = read_meta(out_dir) or {}
    own = {"meta.json", *(s.get("file") for s in meta.get("splits", {}).values() if isinstance(s, dict))}
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in own or not p.is_file())
    if foreign and not meta:
        raise ConfigError(f"output folder {out_dir} exists and is not a prepared corpus; refusing to replace it")
    if foreign:
        raise ConfigError(f"output folder {out_dir} holds files the prepared corpus did not write "
                          f"({', '.join(foreign[:3])}); refusing to replace it")


def _write_split(folder: Path, split: str, docs: list[dict], extra_doc_fields: Iterable[str]) -> dict:
    """Write ``folder/<split>.jsonl``; return its ``meta.json`` entry (counts, sha256, the documents)."""
    path = folder / f"{split}.jsonl"
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for doc in docs:
            record = {"id": doc["id"], "title": doc["title"], "text": doc["text"]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    listed = []
    for doc in docs:
        entry = {"id": doc["id"], "title": doc["title"], "chars": len(doc["text"])}
        entry.update({field: doc[field] for field in extra_doc_fields if field in doc})
        listed.append(entry)
    return {
        "file": path.name,
        "documents": len(docs),
        "chars": sum(len(doc["text"]) for doc in docs),
        "sha256": sha256_file(path),
        "docs": listed,
    }


def _swap_in(tmp: Path, out_dir: Path, meta: dict) -> None:
    """Rename the finished ``tmp`` folder to ``out_dir``, replacing an older corpus there."""
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out_dir, old)
    try:
        os.replace(tmp, out_dir)
    except OSError as exc:
        # Another process finished the same folder first: keep theirs if it is what we want.
        if is_prepared(out_dir, meta["settings"], meta.get("source", {}).get("sha256")):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise CorpusError(f"could not move the prepared corpus into {out_dir}: {exc}") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_corpus(out_dir: Path, docs: dict[str, list[dict]], meta: dict, extra_doc_fields=None) -> Path:
    """Write the three splits and meta.json into a temporary folder, then rename it to ``out_dir``.

    ``extra_doc_fields`` are document keys (besides id/title/chars) listed per document in ``meta.json``.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the corpus is ordinary data
        meta = dict(meta)
        meta["splits"] = {split: _write_split(tmp, split, docs[split], extra_doc_fields or ()) for split in SPLITS}
        with open(tmp / "meta.json", "w", encoding="utf-8", newline="\n") as handle:
            json.dump(meta, handle, ensure_ascii=False, indent=1)
            handle.write("\n")
        _swap_in(tmp, out_dir, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
