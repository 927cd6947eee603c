"""Several processes on one stage: rank/world from the launcher, work slicing, per-shard records, merge.

mlpmem does not run its own process engine: ``accelerate launch`` and ``torchrun`` start the processes
and set ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``; :func:`current` reads them through accelerate's
``PartialState``, which joins the process group (NCCL on GPUs, gloo on CPUs) and gives a barrier.

A sharded stage (datastore, teacher) cuts its work into shards whose content depends only on the
input, never on the number of processes. Each process builds the shards of its own contiguous slice
of the *pending* shards and, after each one, atomically writes a small JSON record ``part-NNNNN.json``
(the shard's files and their sha256). Process 0 later merges the records into ``manifest.json`` in
corpus order. So 1 and N processes write byte-identical shards, a killed process loses at most the
shard it was writing, and a rerun with any number of processes resumes from what verifies.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import PartialState

from mlpmem.errors import CorruptArtifact
from mlpmem.utils.shards import (
    MANIFEST,
    check_manifest,
    clean_temporaries,
    load_array,
    read_json,
    resume_manifest,
    write_json,
)

RECORD = "part-{:05d}.json"


@dataclass(frozen=True)
class Dist:
    """This process's place among the processes of a stage."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    _state: object | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            self._state.wait_for_everyone()


def launched_world() -> int:
    """Processes the launcher started (``WORLD_SIZE``, set by torchrun / accelerate launch), 1 if none."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's global rank set by the launcher (``RANK``), 0 if none; no process group is joined."""
    return int(os.environ.get("RANK", "0"))


def current() -> Dist:
    """The :class:`Dist` of this process; joins the process group when launched with several processes."""
    if launched_world() == 1:
        return Dist()
    state = PartialState(cpu=not torch.cuda.is_available())
    return Dist(state.process_index, state.num_processes, state.local_process_index, state)


def my_slice(items: list, dist: Dist) -> list:
    """Contiguous, balanced slice of ``items`` for this rank (sizes differ by at most one)."""
    per, extra = divmod(len(items), dist.world)
    start = dist.rank * per + min(dist.rank, extra)
    return items[start : start + per + (dist.rank < extra)]


def write_record(out_dir: Path, shard: dict) -> None:
    """Record one finished shard (``{"index", "rows", "files", ...}``) next to its files."""
    write_json(Path(out_dir) / RECORD.format(shard["index"]), shard)


def read_records(out_dir: Path, what: str, verify: bool = True) -> dict[int, dict]:
    """Finished shards recorded by any process, by index; a record whose files fail to verify is dropped
    (with its files: the shard is rebuilt)."""
    records = {}
    for path in sorted(Path(out_dir).glob("part-*.json")):
        try:
            shard = read_json(path, what)
            for entry in shard["files"].values():
                load_array(out_dir, entry, verify=verify, what=what)
        except (CorruptArtifact, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        records[int(shard["index"])] = shard
    return records


def done_indices(out_dir: Path, manifest: dict, what: str) -> set[int]:
    """Shards already finished: merged in the manifest or recorded by a process."""
    return {int(s["index"]) for s in manifest["shards"]} | set(read_records(out_dir, what))


def shards_before(out_dir: Path, rebuild: bool = False) -> list[dict]:
    """The shards a sharded build in ``out_dir`` had finished before this call (merged or recorded; none when it is
    rebuilt, absent or unreadable): a resumed stage times only what it does itself."""
    path = Path(out_dir) / MANIFEST
    if rebuild or not path.is_file():
        return []
    shards = {}
    with contextlib.suppress(CorruptArtifact, KeyError, TypeError, AttributeError):
        shards = {int(s["index"]): s for s in read_json(path, "manifest")["shards"]}
    return list({**shards, **read_records(out_dir, "shards", verify=False)}.values())


def merge_records(out_dir: Path, manifest: dict, num_shards: int, what: str) -> dict:
    """Fold every record into ``manifest`` (shards sorted by index, rows summed), mark it complete when
    all ``num_shards`` are there, write it atomically, then delete the merged records."""
    out_dir = Path(out_dir)
    shards = {int(s["index"]): s for s in manifest["shards"]}
    shards.update(read_records(out_dir, what, verify=False))  # verified when first read by this build
    manifest["shards"] = [shards[i] for i in sorted(shards)]
    manifest["rows"] = sum(s["rows"] for s in manifest["shards"])
    manifest["complete"] = sorted(shards) == list(range(num_shards))
    write_json(out_dir / MANIFEST, manifest)
    for path in out_dir.glob("part-*.json"):
        path.unlink()
    return manifest


SHARD = re.compile(r"^[a-z]+-\d{5}\.npy$")
"""The names of shard files (``keys-00012.npy``): mlpmem's own, listed in a manifest or not."""
INDEX = "index"
"""The sub-folder of a teacher holding its FAISS index (:func:`mlpmem.index.open_or_build`)."""


def remove_build(out_dir: Path) -> None:
    """Delete what a sharded build wrote in ``out_dir`` (its manifest and records, the shards they list, shard-named
    files, temporaries, its index folder), never anything else: a file the user put there stays, with its folder."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return
    listed = {MANIFEST}
    if (out_dir / MANIFEST).is_file():
        with contextlib.suppress(CorruptArtifact, KeyError, TypeError, AttributeError):
            manifest = read_json(out_dir / MANIFEST, f"manifest {out_dir}")
            listed |= {entry["name"] for shard in manifest["shards"] for entry in shard["files"].values()}
    for path in out_dir.iterdir():
        ours = path.name in listed or SHARD.match(path.name) or path.name.startswith("part-") or path.suffix == ".tmp"
        if path.is_file() and ours:
            path.unlink()
    index = out_dir / INDEX
    if index.is_dir():
        for path in index.iterdir():
            if path.is_file() and (path.name in ("index.faiss", "index.json") or path.suffix == ".tmp"):
                path.unlink()
        with contextlib.suppress(OSError):
            index.rmdir()
    with contextlib.suppress(OSError):
        out_dir.rmdir()  # only when nothing else is left


def open_build(out_dir: Path, settings: dict, fresh: dict, rebuild: bool, dist: Dist, what: str) -> dict:
    """Process 0 prepares ``out_dir`` (on rebuild removes what the previous build wrote, drops temporaries,
    checks or writes the manifest); then every process reads the manifest."""
    if dist.is_main:
        if rebuild:
            remove_build(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        clean_temporaries(out_dir)
        resume_manifest(out_dir, settings, what, fresh)
    dist.barrier()
    manifest = read_json(out_dir / MANIFEST, f"{what} {out_dir}")
    check_manifest(manifest, settings, f"{what} {out_dir}")
    return manifest


def finish_build(out_dir: Path, num_shards: int, dist: Dist, what: str) -> dict:
    """Wait for every process, let process 0 merge the records; return the complete manifest."""
    dist.barrier()
    if dist.is_main:
        manifest = read_json(out_dir / MANIFEST, f"{what} {out_dir}")
        manifest = merge_records(out_dir, manifest, num_shards, f"{what} {out_dir}")
        if not manifest["complete"]:
            raise CorruptArtifact(f"{what} {out_dir}: shards are missing after every process finished")
    dist.barrier()
    return read_json(out_dir / MANIFEST, f"{what} {out_dir}")
