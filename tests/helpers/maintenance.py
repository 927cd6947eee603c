"""Helpers of the maintenance tests: open a run folder, new documents, the checksums an operation may change."""

from __future__ import annotations

import hashlib
from pathlib import Path

from helpers.corpus import corpus_text
from mlpmem.cli.maintenance import open_run
from mlpmem.utils.io import write_jsonl


def tiny_run(folder: Path, backbone: str | None = None):
    return open_run(str(folder), backbone, quiet=True)


def new_docs(path: Path, n: int = 3, seed: int = 7, names: bool = True) -> Path:
    """A JSONL of ``n`` documents the tiny corpus does not hold."""
    texts = [f"Document {i} about the harbour. " + t for i, t in enumerate(corpus_text(n, seed=seed))]
    write_jsonl(path, [{"id": f"new{i}", "text": t} if names else {"text": t} for i, t in enumerate(texts)])
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def state(folder: Path) -> dict[str, str]:
    """The checksums of what an operation may change: datastore and teacher manifests (which list every shard's
    checksum), the memory's weights."""
    return {"datastore": digest(folder / "datastore" / "manifest.json"),
            "teacher": digest(folder / "teacher" / "manifest.json"),
            "memory": digest(folder / "memory" / "model.safetensors")}
