"""Tokenized splits on disk: one memory-mapped token stream per split, built once, streaming.

A split is tokenized document by document (read one at a time, encoded in batches) and appended to
``tokens.npy`` (int32 ``[doc_start, tokens..., doc_start, tokens..., ...]``) with ``offsets.npy``
(int64, document ``i`` is ``tokens[offsets[i]:offsets[i+1]]``). So a stage's memory is bounded by the
largest document, not by the corpus: the datastore stage reads windows from the memory map. The folder
is written under a temporary name and renamed when complete; ``manifest.json`` records what it was
built from (the split file's name, size and time, the tokenizer, the cap) and is compared on reuse, and both arrays
carry checksums verified on open.
"""

from __future__ import annotations

import io
import os
import shutil
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from mlpmem.corpora.documents import Document, encode_documents
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.utils.io import remove_written
from mlpmem.utils.shards import (
    FSYNC,
    MANIFEST,
    load_array,
    read_json,
    release,
    save_array,
    sha256_file,
    write_json,
    writing,
)

FORMAT = "mlpmem.corpora.tokens/1"
TOKENS = "tokens.npy"
HEADER = 128
"""Bytes of the ``.npy`` header of ``tokens.npy``: reserved first, written once the length is known."""


class TokenDocs(Sequence):
    """The documents of a split as int32 arrays: views into one token stream (memory-mapped or in RAM)."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray):
        self.tokens, self.offsets = tokens, np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += len(self)
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def release(self) -> None:
        """Drop the pages of the token stream read so far from this process (they stay in the OS page cache), so
        that a pass over the whole corpus keeps the resident set bounded."""
        release(self.tokens)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])


def _npy_header(n: int) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i4", "fortran_order": False, "shape": (n,)})
    header = buf.getvalue()
    assert len(header) == HEADER, len(header)  # numpy pads the header to 64-byte multiples; ours is 128
    return header


def _append_documents(f, docs: Iterable[Document], tokenizer, cap: int | None, bar) -> array:
    """Write ``[doc_start, tokens...]`` of each document to ``f`` (up to ``cap`` tokens in all; documents
    of fewer than 2 tokens, which have no target, are skipped); return the document offsets."""
    offsets, total = array("q", [0]), 0
    for doc in encode_documents(docs, tokenizer):
        doc = doc[: (cap - total) if cap else None].astype("<i4", copy=False)
        if len(doc) < 2:
            continue
        f.write(doc.tobytes())
        total += len(doc)
        offsets.append(total)
        bar.update(len(doc))
        if cap and cap - total < 2:  # no room left for a document with a target
            break
    return offsets


def write_tokens(docs: Iterable[Document], tokenizer, out_dir: Path, settings: dict, cap: int | None = None,
                 progress: bool = True, desc: str = "tokenize") -> TokenDocs:
    """Tokenize ``docs`` (an iterable, read once) into ``out_dir``; atomic (temporary folder, then rename)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.parent.glob(f"{out_dir.name}.tmp-*"):  # left by a killed build
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    tmp.mkdir()
    with writing(tmp):
        with open(tmp / TOKENS, "wb") as f, tqdm(desc=desc, unit="tok", disable=not progress) as bar:
            f.write(b"\0" * HEADER)
            offsets = _append_documents(f, docs, tokenizer, cap, bar)
            f.seek(0)
            f.write(_npy_header(offsets[-1]))
            f.flush()
            if FSYNC:
                os.fsync(f.fileno())
        entry = {"name": TOKENS, "sha256": sha256_file(tmp / TOKENS), "shape": [offsets[-1]], "dtype": "int32"}
        manifest = {"format": FORMAT, **settings, "documents": len(offsets) - 1, "tokens": offsets[-1],
                    "files": {"tokens": entry, "offsets": save_array(tmp, "offsets.npy", np.asarray(offsets))}}
        write_json(tmp / MANIFEST, manifest)
    kept = remove_written(out_dir, lambda name: name in (TOKENS, "offsets.npy", MANIFEST))  # a stale cache
    if kept:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"refusing to replace {out_dir}: it holds {', '.join(kept[:3])}, which mlpmem did not "
                          "write; move them out of it first")
    os.replace(tmp, out_dir)
    return open_tokens(out_dir)


def open_tokens(folder: Path, verify: bool = True) -> TokenDocs:
    """The memory-mapped documents of a tokenized split (checksums verified unless ``verify`` is off)."""
    folder = Path(folder)
    what = f"tokenized split {folder}"
    manifest = read_json(folder / MANIFEST, what)
    if manifest.get("format") != FORMAT:
        raise CorruptArtifact(f"{what}: {MANIFEST} is not a tokens manifest")
    files = manifest["files"]
    tokens = load_array(folder, files["tokens"], verify, what)
    offsets = np.array(load_array(folder, files["offsets"], verify, what))
    if offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 2):
        raise CorruptArtifact(f"{what}: offsets.npy does not cut tokens.npy into documents: rebuild it")
    return TokenDocs(tokens, offsets)


def is_current(folder: Path, settings: dict) -> bool:
    """Whether ``folder`` holds a complete tokenized split built with ``settings``."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return False
    manifest = read_json(path, f"tokenized split {folder}")
    return manifest.get("format") == FORMAT and all(manifest.get(k) == v for k, v in settings.items())
