"""A commit by renames, recorded before it starts: a kill at any point is completed by the next command.

A writer that changes several files of a run folder at once (``mlpmem update``, ``forget``) stages the new files
in ``maintenance/pending/``, writes ``commit.json`` there (the renames staged -> live and the deletions, relative
to the run folder) atomically, then performs them (:func:`commit`). Renames are idempotent (one whose source is
gone is done), a folder is swapped whole, and the files no longer listed are deleted only after every rename.

So a commit.json left by a kill is a promise that :func:`recover` keeps: every command that opens a run folder
completes it first, under the folder's lock (:class:`mlpmem.pipeline.run.Run` does on opening; ``mlpmem
summarize`` too), and no command ever reads half a commit.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mlpmem.layout import RunLayout
from mlpmem.utils.shards import read_json, write_json

PENDING = "pending"
PLAN = "plan.json"
COMMIT = "commit.json"
OLD = ".old-maintenance"
"""Suffix of a folder being replaced (the memory): ``memory`` -> ``.memory.old-maintenance`` until the swap ends."""


def staging(run_dir: Path) -> Path:
    """The folder an operation on ``run_dir`` stages its files in: ``maintenance/pending/``."""
    return RunLayout(Path(run_dir)).maintenance / PENDING


def is_pending(run_dir: Path) -> bool:
    """Whether a recorded commit of ``run_dir`` waits to be completed."""
    return (staging(run_dir) / COMMIT).is_file()


def commit(run_dir: Path, moves: list[tuple[Path, Path]], deletes: list[Path]) -> None:
    """Record the renames (staged -> live) and deletions, then perform them (see the module docstring)."""
    run_dir = Path(run_dir)
    rel = lambda p: os.path.relpath(p, run_dir)  # noqa: E731
    write_json(staging(run_dir) / COMMIT, {"moves": [[rel(a), rel(b)] for a, b in moves],
                                            "deletes": [rel(p) for p in deletes]})
    apply(run_dir)


def apply(run_dir: Path) -> None:
    """Perform the recorded commit of ``run_dir`` (idempotent), then remove the staging folder."""
    pending = staging(run_dir)
    recorded = read_json(pending / COMMIT, "maintenance commit")
    for src, dst in recorded["moves"]:
        _move(run_dir / src, run_dir / dst)
    for path in recorded["deletes"]:
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


def recover(run_dir: Path) -> bool:
    """Complete the commit a kill interrupted in ``run_dir`` (True if there was one); the caller holds the run
    folder's lock. A staged operation without a commit is left for its own command to resume or discard."""
    run_dir = Path(run_dir)
    if not is_pending(run_dir):
        return False
    apply(run_dir)
    print(f"note: completed the maintenance operation an earlier command committed in {run_dir}", file=sys.stderr)
    return True
