"""Sharded, memory-mapped arrays with a JSON manifest: atomic writes, checksums, resumable builds.

An artifact folder holds ``manifest.json`` and ``.npy`` shard files. Every file is written under a
temporary name and renamed when complete, and the manifest (rewritten atomically after each shard)
records each shard's rows and sha256, so a killed build resumes from the last complete shard and a
truncated or bit-flipped shard is detected when the artifact is opened.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from mlpmem.errors import CorruptArtifact

MANIFEST = "manifest.json"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=1) + "\n").encode())


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CorruptArtifact(f"{what}: {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CorruptArtifact(f"{what}: {path} is not valid JSON") from None


def save_array(folder: Path, name: str, array: np.ndarray) -> dict:
    """Write ``array`` to ``folder/name`` atomically; return ``{"name", "sha256", "shape", "dtype"}``."""
    path = folder / name
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"name": name, "sha256": sha256_file(path), "shape": list(array.shape), "dtype": str(array.dtype)}


def load_array(folder: Path, entry: dict, verify: bool, what: str) -> np.ndarray:
    """Memory-map one shard file recorded by :func:`save_array`, checking size/shape and (optionally) sha256."""
    path = Path(folder) / entry["name"]
    if not path.is_file():
        raise CorruptArtifact(f"{what}: shard {path.name} is missing")
    if verify and sha256_file(path) != entry["sha256"]:
        raise CorruptArtifact(f"{what}: shard {path.name} fails its checksum (truncated or corrupted)")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        raise CorruptArtifact(f"{what}: shard {path.name} is truncated or not a .npy file") from None
    if list(array.shape) != entry["shape"] or str(array.dtype) != entry["dtype"]:
        raise CorruptArtifact(f"{what}: shard {path.name} has shape {array.shape}, expected {entry['shape']}")
    return array


def clean_temporaries(folder: Path) -> None:
    for tmp in Path(folder).glob("*.tmp"):
        tmp.unlink()


def compare_settings(recorded: dict, wanted: dict, what: str, error=CorruptArtifact) -> None:
    """Raise if an existing artifact was built with other settings than the ones asked for now."""
    for key, value in wanted.items():
        if recorded.get(key) != value:
            raise error(
                f"{what} was built with {key}={recorded.get(key)!r}, not {value!r}; "
                "use another folder or rebuild it (--rebuild)"
            )


def resume_manifest(out_dir: Path, settings: dict, what: str, fresh: dict) -> dict:
    """The manifest of a build in ``out_dir``: the existing one if its settings match (and every shard it
    lists still verifies), else a new one made of ``settings`` and ``fresh``."""
    path = Path(out_dir) / MANIFEST
    if path.exists():
        manifest = read_json(path, what)
        compare_settings(manifest, settings, f"{what} {out_dir}")
        for shard in manifest["shards"]:  # a resumed build trusts only shards that still verify
            for entry in shard["files"].values():
                load_array(out_dir, entry, verify=True, what=f"{what} {out_dir}")
        return manifest
    manifest = dict(settings, **fresh)
    write_json(path, manifest)
    return manifest
