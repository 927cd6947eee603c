"""One operation on a run at a time, staged, then committed by renames: a kill leaves the previous run intact.

An operation (``update``, ``forget``) writes everything new under ``maintenance/pending/``: its plan (what it
does), new shard files (under names no live manifest uses), the new manifests of the datastore, the teacher and
the maintenance record, the new memory and its checksums. Nothing the run reads is touched until then, so a kill
or a full disk at any point before the commit leaves the run as it was, and a rerun of the same command resumes
the staged work (the key extraction, the teacher shards and the fine-tuning checkpoint each resume).

The commit writes ``commit.json`` (the renames and the deletions, relative to the run folder) atomically, then
performs them. Renames are idempotent (one whose source is gone is done), so a kill during the commit is
completed by the next maintenance command (:func:`recover`); only after every rename are the files the new
manifests no longer list deleted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.utils.shards import read_json, write_json

PENDING = "pending"
PLAN = "plan.json"
COMMIT = "commit.json"
OLD = ".old-maintenance"
"""Suffix of a folder being replaced (the memory): ``memory`` -> ``.memory.old-maintenance`` until the swap ends."""


class Pending:
    """The staging folder of the operation in progress in one run folder."""

    def __init__(self, run_dir: Path, maintenance_dir: Path):
        self.run_dir = Path(run_dir)
        self.root = Path(maintenance_dir) / PENDING

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def plan(self) -> dict | None:
        """The plan of the staged operation, or None when nothing is staged."""
        path = self.path(PLAN)
        return read_json(path, "pending maintenance plan") if path.is_file() else None

    def start(self, plan: dict, command: str) -> bool:
        """Stage ``plan`` (True: the same plan was staged before and resumes); another staged plan is refused."""
        staged = self.plan()
        if staged is not None and staged != plan:
            raise MlpmemError(f"{self.run_dir} has an unfinished {staged.get('kind', 'operation')} of other "
                              f"documents or settings: rerun that command to finish it, or discard it with "
                              f"`{command} --abort`")
        if staged is None:
            self.discard()  # leftovers of a staging killed before its plan was written
            self.root.mkdir(parents=True, exist_ok=True)
            write_json(self.path(PLAN), plan)
        return staged is not None

    def discard(self) -> bool:
        """Delete the staged operation (never a committed one, see :func:`recover`); True if there was one."""
        if self.path(COMMIT).is_file():
            raise MlpmemError(f"the operation staged in {self.root} is committed: rerun any maintenance command to "
                              "complete it")
        existed = self.root.exists()
        shutil.rmtree(self.root, ignore_errors=True)
        return existed

    def commit(self, moves: list[tuple[Path, Path]], deletes: list[Path]) -> None:
        """Record the renames (staged -> live) and deletions, then perform them (see the module docstring)."""
        rel = lambda p: os.path.relpath(p, self.run_dir)  # noqa: E731
        write_json(self.path(COMMIT), {"moves": [[rel(a), rel(b)] for a, b in moves],
                                       "deletes": [rel(p) for p in deletes]})
        apply(self.run_dir, self.root)


def apply(run_dir: Path, pending: Path) -> None:
    """Perform a recorded commit (idempotent), then remove the staging folder."""
    commit = read_json(pending / COMMIT, "maintenance commit")
    for src, dst in commit["moves"]:
        _move(run_dir / src, run_dir / dst)
    for path in commit["deletes"]:
        target = run_dir / path
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    (pending / PLAN).unlink(missing_ok=True)  # first: a kill below leaves a commit to redo, never a stale plan
    shutil.rmtree(pending, ignore_errors=True)


def _move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` (a folder replaces the previous one whole); nothing to do once ``src`` is gone."""
    old = dst.with_name(f".{dst.name}{OLD}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        if dst.exists():
            shutil.rmtree(old, ignore_errors=True)
            dst.rename(old)
        src.rename(dst)
    elif src.exists():
        os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)


def recover(run_dir: Path, maintenance_dir: Path) -> bool:
    """Complete a commit a kill interrupted (True if there was one); a staged, uncommitted operation is left for
    its command to resume."""
    pending = Path(maintenance_dir) / PENDING
    if not (pending / COMMIT).is_file():
        return False
    apply(Path(run_dir), pending)
    return True
