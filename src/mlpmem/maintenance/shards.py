"""The shards of a datastore or teacher as an operation rearranges them: kept, dropped, rewritten or new.

The datastore's (and the teacher's) ``manifest.json`` lists its shards in row order; teacher shard ``i`` covers
datastore shard ``i``. An operation builds the new list from records of three kinds: a live shard kept as it
is (its record unchanged but for its position), a live shard rewritten without some rows, and a new shard; the
files of the last two are written under names no live file has (:func:`allocate`). New documents always get
shards of their own, so a forget of exactly those documents drops whole shards and leaves every other record as
it was: the manifest returns to its previous bytes. Counts (``rows``, ``num_windows``, ``num_targets``) are
recomputed from the records, never carried as deltas.

:class:`ShardView` reads such a list, wherever its files are now (live or staged), as one store: the rows the
teacher's search and the FAISS index builder read (:func:`mlpmem.index.build_index`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem.utils.shards import ShardedRows, load_array, read_json, save_array, write_json

NUMBERED = re.compile(r"^[a-z]+-(\d{5})\.npy$")
STAGED_RECORD = "shard-{:05d}.json"


def manifest_bytes(manifest: dict) -> bytes:
    """The bytes :func:`mlpmem.utils.shards.write_json` writes for ``manifest``."""
    return (json.dumps(manifest, indent=1) + "\n").encode()


def manifest_sha(manifest: dict) -> str:
    """The sha256 of ``manifest`` as written (what a teacher records of its datastore)."""
    return hashlib.sha256(manifest_bytes(manifest)).hexdigest()


@dataclass
class Shard:
    """One shard's manifest record and where each of its files is now."""

    record: dict
    paths: dict[str, Path]

    @classmethod
    def live(cls, folder: Path, record: dict) -> Shard:
        return cls(record, {name: Path(folder) / e["name"] for name, e in record["files"].items()})

    def load(self, what: str, verify: bool = False) -> dict[str, np.ndarray]:
        """The shard's fields, memory-mapped (checked against their records; their checksums with ``verify``)."""
        return {name: load_array(path.parent, {**self.record["files"][name], "name": path.name}, verify, what)
                for name, path in self.paths.items()}

    @property
    def rows(self) -> int:
        return int(self.record["rows"])


class ShardView:
    """The rows of a list of shards as one read-only store (row ``i`` of the concatenation is id ``i``)."""

    def __init__(self, shards: list[Shard], hidden_size: int, what: str):
        self.path = Path(what)  # named in messages only
        self.shards = [s.load(what) for s in shards]
        self.offsets = np.cumsum([0] + [s.rows for s in shards])
        self._hidden = hidden_size

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def hidden_size(self) -> int:
        return self._hidden

    def rows(self, name: str) -> ShardedRows:
        return ShardedRows([s[name] for s in self.shards])

    def array(self, name: str) -> np.ndarray:
        return np.concatenate([s[name] for s in self.shards])

    def iter_shards(self, name: str):
        yield from self.rows(name).chunks()


def renumbered(records: list[dict]) -> list[dict]:
    """The records with ``index`` set to their position (each record's keys keep their order)."""
    return [{**r, "index": i} for i, r in enumerate(records)]


def with_shards(manifest: dict, records: list[dict]) -> dict:
    """``manifest`` listing ``records`` instead of its shards, its counts recomputed (key order kept)."""
    out = dict(manifest)
    out["shards"] = renumbered(records)
    out["rows"] = sum(int(r["rows"]) for r in records)
    if "num_windows" in out:  # a keystore: one row per scored target, windows counted per shard
        out["num_windows"] = sum(int(r.get("windows", 0)) for r in records)
        out["num_targets"] = out["rows"]
    return out


def used_numbers(folders: list[Path], manifests: list[dict]) -> set[int]:
    """Every shard-file number a live manifest lists or a file in ``folders`` carries."""
    names = {e["name"] for m in manifests for s in m["shards"] for e in s["files"].values()}
    names |= {p.name for f in folders if Path(f).is_dir() for p in Path(f).iterdir()}
    return {int(m.group(1)) for m in map(NUMBERED.match, names) if m}


def allocate(count: int, used: set[int]) -> list[int]:
    """``count`` new shard-file numbers above every used one (the same for the same folders: a resumed operation
    stages under the names it chose before)."""
    start = max(used, default=-1) + 1
    return list(range(start, start + count))


def file_name(field: str, number: int) -> str:
    return f"{field}-{number:05d}.npy"


def save_shard(folder: Path, number: int, arrays: dict[str, np.ndarray], extra: dict) -> dict:
    """Write a staged shard (each field as ``<field>-<number>.npy``, then its record): resumable by
    :func:`staged_shard`. Returns the record (``rows``, ``files`` and the ``extra`` keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: save_array(folder, file_name(name, number), a) for name, a in arrays.items()}
    rows = len(next(iter(arrays.values())))
    record = {"index": 0, **extra, "rows": rows, "files": files}
    write_json(folder / STAGED_RECORD.format(number), record)
    return record


def staged_shard(folder: Path, number: int) -> dict | None:
    """The record of a shard staged by :func:`save_shard` whose files all verify, else None (it is redone)."""
    path = folder / STAGED_RECORD.format(number)
    if not path.is_file():
        return None
    record = read_json(path, "staged shard")
    try:
        for entry in record["files"].values():
            load_array(folder, entry, verify=True, what="staged shard")
    except Exception:  # noqa: BLE001 - any damage means: write the shard again
        return None
    return record


def staged_paths(folder: Path, record: dict) -> dict[str, Path]:
    return {name: folder / e["name"] for name, e in record["files"].items()}
