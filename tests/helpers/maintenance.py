"""Helpers of the maintenance tests: open a run folder, new documents, the checksums an operation may change."""

from __future__ import annotations

import hashlib
import json
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


def committed_state(folder: Path) -> dict:
    """What a maintenance operation leaves once committed: :func:`state`, the memory's checksum record, the
    documents the run holds and the operations (kind, documents), the files of the datastore and the teacher; and
    nothing half-done (no staging folder, no folder swapped out)."""
    ledger = json.loads((folder / "maintenance" / "manifest.json").read_text())
    leftovers = sorted(p.name for p in folder.rglob("*") if p.name.endswith((".old-maintenance", ".tmp")))
    return {**state(folder), "checksums": digest(folder / "memory.sha256.json"),
            "documents": [d["id"] for d in ledger["documents"]],
            "operations": [(op["kind"], op["documents"]) for op in ledger["operations"]],
            "files": sorted(p.name for sub in ("datastore", "teacher") for p in (folder / sub).iterdir()),
            "pending": (folder / "maintenance" / "pending").exists(), "leftovers": leftovers}


def tree_digest(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder`` but its lock: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): digest(p) for p in sorted(Path(folder).rglob("*"))
            if p.is_file() and p.name != ".lock"}
