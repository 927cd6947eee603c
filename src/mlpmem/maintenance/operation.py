"""What ``update`` and ``forget`` share: the run as an operation finds it, the teacher's search, the commit.

:func:`open_operation` (under the run folder's lock, on a run whose opening completed any interrupted commit)
refuses a backbone or tokenizer other than the run's (by the datastore's fingerprint), verifies the datastore,
the teacher and the memory, and reads the documents the run holds. :func:`reteach` recomputes teacher shards
against a changed datastore. :func:`commit` stages the three new manifests and swaps them in with the new shard
files, the new memory and its checksums (:mod:`mlpmem.maintenance.transaction`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem.datastore import KeyStore, build_keystore
from mlpmem.errors import MlpmemError
from mlpmem.index import IndexConfig, build_index
from mlpmem.maintenance.documents import Holdings
from mlpmem.maintenance.ledger import committed, holdings, ledger_path, load_ledger
from mlpmem.maintenance.shards import (
    Shard,
    ShardView,
    file_name,
    manifest_bytes,
    manifest_sha,
    save_shard,
    staged_paths,
    staged_shard,
)
from mlpmem.maintenance.targets import knn_rows
from mlpmem.maintenance.transaction import Pending
from mlpmem.pipeline import records, require
from mlpmem.pipeline.datastore import keystore_config
from mlpmem.pipeline.run import Run
from mlpmem.teacher import TeacherStore
from mlpmem.utils.shards import MANIFEST, atomic_write_bytes, sha256_file, write_json

TEACHER_FIELDS = ("ids", "probs", "residual")


@dataclass
class Search:
    """The teacher's search, as its manifest records it: k, T, top-K, the index."""

    k: int
    temperature: float
    top_k: int
    index: IndexConfig
    batch: int

    def index_over(self, view) -> object:
        return build_index(view, self.index)

    def rows(self, index, view: ShardView, shard: int, progress: bool, desc: str = "teacher"):
        """Sparse targets of every row of ``view``'s shard ``shard`` (self excluded by its id in ``view``)."""
        keys, first = view.shards[shard]["keys"], int(view.offsets[shard])
        return knn_rows(index, keys, np.arange(first, first + len(keys)), view.rows("values"), self.k,
                        self.temperature, self.top_k, self.batch, progress, desc)


@dataclass
class Operation:
    """The run an operation changes, as it was found."""

    run: Run
    store: KeyStore
    teacher: TeacherStore
    ledger: dict
    pending: Pending

    @property
    def held(self) -> Holdings:
        return holdings(self.ledger)

    @property
    def search(self) -> Search:
        m = self.teacher.manifest
        return Search(int(m["k"]), float(m["temperature"]), int(m["top_k"]), IndexConfig(**m["index"]),
                      self.run.cfg.teacher.query_batch)

    def live_datastore(self) -> list[Shard]:
        return [Shard.live(self.store.path, r) for r in self.store.manifest["shards"]]

    def live_teacher(self) -> list[Shard]:
        """The teacher's shards; each record's ``computed`` says in the datastore of which operation its targets
        were searched (none: 0, the run's build). A teacher rebuilt after the last operation (``mlpmem teacher
        --rebuild``) was searched in the latest datastore: its records are stamped so."""
        shards = [Shard.live(self.teacher.path, r) for r in self.teacher.manifest["shards"]]
        if self.ledger["teacher"] == sha256_file(self.teacher.path / MANIFEST):
            return shards
        latest = max((op["seq"] for op in self.ledger["operations"]), default=0)
        return [Shard({**s.record, "computed": latest}, s.paths) for s in shards]


def open_operation(run: Run) -> Operation:
    """The run, checked (see the module docstring); call it under the run folder's lock."""
    require(run, ("datastore", "teacher", "train"))
    layout = run.layout
    store = KeyStore(layout.datastore)
    store.check_backbone(*run.backbone)
    teacher = TeacherStore(layout.teacher, datastore=store)
    records.verify_memory(run)
    ledger = load_ledger(layout, store.num_rows)
    if holdings(ledger).num_rows != store.num_rows:
        raise MlpmemError(f"{ledger_path(layout)} lists {holdings(ledger).num_rows} positions but the datastore "
                          f"holds {store.num_rows}: it was changed outside mlpmem")
    return Operation(run, store, teacher, ledger, Pending(run.dir))


def run_keys(run: Run, tokens: list[np.ndarray], folder: Path, desc: str) -> KeyStore:
    """The keystore of token documents with the run's own key settings (backbone, layer, site, windows,
    precision), built (or resumed) in ``folder``."""
    cfg, (model, tokenizer) = run.cfg, run.backbone
    build_keystore(keystore_config(cfg), model, tokenizer, tokens, folder, progress=run.progress, desc=desc)
    return KeyStore(folder)


def reteach(op: Operation, index, view: ShardView, shards: list[int], numbers: list[int], current: list[Shard],
            seq: int, folder: Path) -> dict[int, Shard]:
    """Recompute the teacher of ``view``'s shards ``shards`` against ``index``; ``{shard: new teacher shard}`` for
    those whose targets changed (staged under ``numbers``, resumable), ``current`` holding the teacher as it is."""
    out = {}
    for s, number in zip(shards, numbers):
        record = staged_shard(folder, number)
        if record is None:
            ids, probs, residual = op.search.rows(index, view, s, op.run.progress, f"teacher shard {s}")
            now = current[s].load("teacher")
            if (np.array_equal(ids, now["ids"]) and np.array_equal(probs.astype(np.float16), now["probs"])
                    and np.array_equal(residual, now["residual"])):
                continue
            record = save_shard(folder, number, teacher_arrays((ids, probs, residual)), {"computed": seq})
        out[s] = Shard(record, staged_paths(folder, record))
    return out


def teacher_arrays(rows) -> dict[str, np.ndarray]:
    ids, probs, residual = rows
    return {"ids": ids.astype(np.int32), "probs": probs.astype(np.float16), "residual": residual.astype(np.float32)}


def shard_moves(shards: list[Shard], folder: Path) -> list[tuple[Path, Path]]:
    """Renames that put the staged files of ``shards`` into the live ``folder`` under their recorded names (live
    shards have none)."""
    moves = []
    for shard in shards:
        for name, path in shard.paths.items():
            target = Path(folder) / shard.record["files"][name]["name"]
            if path != target:
                moves.append((path, target))
    return moves


def renamed(record: dict, number: int) -> dict:
    """A staged keystore's shard record under the live file names of ``number`` (its contents unchanged)."""
    files = {name: {**e, "name": file_name(name, number)} for name, e in record["files"].items()}
    return {**record, "files": files}


def commit(op: Operation, datastore: dict, teacher: dict, documents: list[dict], entry: dict,
           moves: list[tuple[Path, Path]], deletes: list[Path]) -> None:
    """Stage the new manifests (the teacher's pointing at the new datastore's), then swap everything in."""
    pending, layout = op.pending, op.run.layout
    teacher = {**teacher, "datastore_manifest_sha": manifest_sha(datastore)}
    atomic_write_bytes(pending.path("datastore.json"), manifest_bytes(datastore))
    atomic_write_bytes(pending.path("teacher.json"), manifest_bytes(teacher))
    ledger = committed(op.ledger, documents, entry, manifest_sha(datastore), manifest_sha(teacher))
    write_json(pending.path("ledger.json"), ledger)
    layout.maintenance.mkdir(exist_ok=True)
    final = [(pending.path("datastore.json"), layout.datastore / MANIFEST),
             (pending.path("teacher.json"), layout.teacher / MANIFEST),
             (pending.path("memory"), layout.memory),
             (pending.path("memory.sha256.json"), layout.memory_checksums),
             (pending.path("ledger.json"), ledger_path(layout))]
    # the training's checkpoint and best weights are the memory before this operation: resumed, `mlpmem train`
    # would bring that memory back, so they go (train_state.json stays: the history of the first training)
    stale = [layout.train / "checkpoint", layout.train / "best"]
    pending.commit([*moves, *final], [*deletes, *stale])


def staged_text(op: Operation, rows: list[dict]) -> Path:
    """A JSONL of ``{"id", "text"}`` staged for the run's texts folder."""
    path = op.pending.path("texts.jsonl")
    atomic_write_bytes(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    return path


def texts_folder(op: Operation) -> Path:
    return op.run.layout.maintenance / "texts"


def relative_text(path: Path, op: Operation) -> str:
    """A texts file as the run's list records it (relative to ``maintenance/``)."""
    return os.path.relpath(path, op.run.layout.maintenance)


def unreferenced(folder: Path, before: dict, after: list[Shard]) -> list[Path]:
    """The files of ``before`` (a live manifest in ``folder``) that the shards ``after`` no longer list."""
    keep = {e["name"] for s in after for e in s.record["files"].values()}
    return [Path(folder) / e["name"] for r in before["shards"] for e in r["files"].values() if e["name"] not in keep]
