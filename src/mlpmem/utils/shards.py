"""Sharded, memory-mapped arrays with a JSON manifest: atomic writes, checksums, resumable builds.

An artifact folder holds ``manifest.json`` and ``.npy`` shard files. Every file is written under a
temporary name unique to the writing process (``<name>.<pid>.tmp``) and renamed when complete, and the
manifest (rewritten atomically after each shard)
records each shard's rows and sha256, so a killed build resumes from the last complete shard and a
truncated or bit-flipped shard is detected when the artifact is opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import shutil
from pathlib import Path

import numpy as np

from mlpmem.errors import CorruptArtifact, MlpmemError
from mlpmem.freshness import check
from mlpmem.utils.limits import full_disk_cause

MANIFEST = "manifest.json"
FSYNC = os.environ.get("MLPMEM_FSYNC", "1") != "0"
"""fsync every file before its rename (survives power loss; a killed process needs only the rename).
``MLPMEM_FSYNC=0`` skips it, e.g. for tests on a busy disk."""


REBUILD_HINT = "rebuild it with --rebuild"
"""How a damaged artifact is repaired: the stage's command with ``--rebuild``."""
_TMP = re.compile(r"(\.\d+)?\.tmp$")


def temporary(path: Path) -> Path:
    """The name ``path`` is written under before its rename: unique to this process, so two writers never
    share a temporary file."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


def committed(tmp: Path) -> Path:
    """The final path of a temporary of :func:`temporary` (or of an older ``<name>.tmp``)."""
    return tmp.with_name(_TMP.sub("", tmp.name))


class DiskFull(MlpmemError):
    """The disk (or a quota / file-size limit) filled up during a write; what was committed before is intact."""


@contextlib.contextmanager
def writing(tmp: Path, final: Path | None = None):
    """Write ``tmp`` (a file or a folder, to become ``final``: by default the name :func:`temporary` made it from);
    on any failure remove it, and turn a full disk into a one-line :class:`DiskFull` naming ``final``."""
    try:
        yield
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        cause = full_disk_cause(exc)
        if cause is not None:
            raise DiskFull(f"disk full while writing {final or committed(tmp)} "
                           f"({cause}): free space and rerun, finished work is kept") from None
        raise


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = temporary(path)
    with writing(tmp), open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if FSYNC:
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
    tmp = temporary(path)
    with writing(tmp), open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        f.flush()
        if FSYNC:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"name": name, "sha256": sha256_file(path), "shape": list(array.shape), "dtype": str(array.dtype)}


def load_array(folder: Path, entry: dict, verify: bool, what: str, hint: str = REBUILD_HINT) -> np.ndarray:
    """Memory-map one shard file recorded by :func:`save_array`, checking size/shape and (optionally) sha256;
    a failed check says how to repair it (``hint``)."""
    path = Path(folder) / entry["name"]
    if not path.is_file():
        raise CorruptArtifact(f"{what}: shard {path.name} is missing; {hint}")
    if verify and sha256_file(path) != entry["sha256"]:
        raise CorruptArtifact(f"{what}: shard {path.name} fails its checksum (truncated or corrupted); {hint}")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        raise CorruptArtifact(f"{what}: shard {path.name} is truncated or not a .npy file; {hint}") from None
    if list(array.shape) != entry["shape"] or str(array.dtype) != entry["dtype"]:
        raise CorruptArtifact(f"{what}: shard {path.name} has shape {array.shape}, expected {entry['shape']}; "
                              f"{hint}")
    return array


def clean_temporaries(folder: Path) -> None:
    for tmp in Path(folder).glob("*.tmp"):
        tmp.unlink()


def check_manifest(manifest: dict, settings: dict, what: str) -> None:
    """Refuse a manifest whose recorded settings are not ``settings`` (:func:`mlpmem.freshness.check` over the
    settings' keys: the rest of a manifest is its progress)."""
    check({k: manifest[k] for k in settings if k in manifest}, settings, what, error=CorruptArtifact)


def resume_manifest(out_dir: Path, settings: dict, what: str, fresh: dict) -> dict:
    """The manifest of a build in ``out_dir``: the existing one if its settings match (and every shard it
    lists still verifies), else a new one made of ``settings`` and ``fresh``."""
    path = Path(out_dir) / MANIFEST
    if path.exists():
        manifest = read_json(path, what)
        check_manifest(manifest, settings, f"{what} {out_dir}")
        for shard in manifest["shards"]:  # a resumed build trusts only shards that still verify
            for entry in shard["files"].values():
                load_array(out_dir, entry, verify=True, what=f"{what} {out_dir}")
        return manifest
    manifest = dict(settings, **fresh)
    write_json(path, manifest)
    return manifest


def release(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped shard from this process (they stay in the OS page cache), so that
    streaming over a datastore larger than RAM keeps the resident set bounded."""
    handle = getattr(array, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


class ShardedRows:
    """One field of a sharded artifact as a single read-only array of rows, read on demand.

    ``rows[idx]`` (an int array of any shape, or a slice) gathers those rows from the memory-mapped shards
    and releases the touched pages afterwards; nothing is ever concatenated in RAM.
    """

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.offsets = np.cumsum([0] + [len(a) for a in arrays])  # shard i holds rows offsets[i]:offsets[i+1]
        self.shape = (int(self.offsets[-1]), *arrays[0].shape[1:])
        self.dtype = arrays[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        if isinstance(idx, slice):
            idx = np.arange(*idx.indices(len(self)))
        idx = np.asarray(idx, dtype=np.int64)
        flat = idx.ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"row index out of range [0, {len(self)})")
        out = np.empty((flat.size, *self.shape[1:]), dtype=self.dtype)
        shard = np.searchsorted(self.offsets, flat, side="right") - 1
        order = np.argsort(flat, kind="stable")  # sorted reads are sequential within each shard
        cuts = np.searchsorted(shard[order], np.arange(len(self.arrays) + 1))
        for s in range(len(self.arrays)):
            sel = order[cuts[s] : cuts[s + 1]]
            if len(sel):
                out[sel] = self.arrays[s][flat[sel] - self.offsets[s]]
                release(self.arrays[s])
        return out.reshape(*idx.shape, *self.shape[1:])

    def __array__(self, dtype=None, copy=None):
        whole = np.concatenate(self.arrays)
        return whole if dtype is None else whole.astype(dtype)

    def chunks(self):
        """``(first_row, rows)`` of every shard in order, each read into RAM and released after use."""
        for i, array in enumerate(self.arrays):
            chunk = np.array(array)
            release(array)
            yield int(self.offsets[i]), chunk
