"""One operation on a run at a time, staged, then committed by renames: a kill leaves the previous run intact.

An operation (``update``, ``forget``) writes everything new under ``maintenance/pending/``: its plan (what it
does), new shard files (under names no live manifest uses), the new manifests of the datastore, the teacher and
the maintenance record, the new memory and its checksums. Nothing the run reads is touched until then, so a kill
or a full disk at any point before the commit leaves the run as it was, and a rerun of the same command resumes
the staged work (the key extraction, the teacher shards and the fine-tuning checkpoint each resume). An operation
checks everything it can refuse before it stages its plan: a refused operation leaves nothing behind.

The commit itself (:mod:`mlpmem.utils.commit`) records its renames before it performs them; a kill during it is
completed by the next command of any kind that opens the run folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.utils.commit import COMMIT, PLAN, commit, staging
from mlpmem.utils.shards import read_json, write_json


class Pending:
    """The staging folder of the operation in progress in one run folder."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.root = staging(self.run_dir)

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
        """Delete the staged operation (never a committed one, which the run's opening completes); True if there
        was one."""
        if self.path(COMMIT).is_file():
            raise MlpmemError(f"the operation staged in {self.root} is committed: rerun any mlpmem command on "
                              f"{self.run_dir} to complete it")
        existed = self.root.exists()
        shutil.rmtree(self.root, ignore_errors=True)
        return existed

    def commit(self, moves: list[tuple[Path, Path]], deletes: list[Path]) -> None:
        """Record the renames (staged -> live) and deletions, then perform them (:func:`mlpmem.utils.commit.commit`)."""
        commit(self.run_dir, moves, deletes)
