"""One writer per run folder: an exclusive lock on ``<folder>/.lock`` that names its holder.

The lock is an ``flock`` on a file that stays in the folder; the holder writes its pid, host, command and start
time into it. The kernel drops the lock when the holding process ends, however it ends, so a lock left by a
killed process is stale by construction: the next command takes it at once (and says so when the file still
names a process that is gone). A second command while the holder lives fails at once with a one-line
:class:`~mlpmem.errors.RunBusy` that says who holds the folder; it never waits silently. A folder that cannot be
written (a read-only file system, no permission) is a one-line :class:`~mlpmem.errors.ReadOnlyFolder`.

Within one process the lock is re-entrant (the CLI holds it around the pipeline, which takes it again).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mlpmem.errors import ReadOnlyFolder, RunBusy
from mlpmem.utils.limits import unwritable_cause

LOCK_NAME = ".lock"
_HELD: dict[str, tuple[int, int]] = {}
"""Folder (resolved) -> (file descriptor, depth) of the locks this process holds."""


def holder_info(command: str | None = None) -> dict:
    """What a lock file records about its holder."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command or " ".join(sys.argv),
            "since": time.strftime("%Y-%m-%d %H:%M:%S")}


def read_holder(path: Path) -> dict:
    """The holder recorded in a lock file (empty if the file is missing, empty or unreadable)."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


def describe(info: dict) -> str:
    """``pid 123 on host h since ... (`mlpmem run ...`)`` for a lock's holder."""
    if not info.get("pid"):
        return "another process (it is still starting)"
    text = f"pid {info['pid']} on host {info.get('host', '?')} since {info.get('since', '?')}"
    text += f" (`{info['command']}`)" if info.get("command") else ""
    if info.get("host") == socket.gethostname() and not pid_alive(int(info["pid"])):
        text += ", which has ended while a process it started still holds the lock"
    return text


@contextlib.contextmanager
def folder_lock(folder: str | Path, command: str | None = None) -> Iterator[dict | None]:
    """Hold the lock of ``folder`` (created if missing) for the ``with`` block.

    Yields the stale holder a dead process left in the lock file (or None), so a caller can say it took over.
    Raises :class:`RunBusy` naming the holder when a live process holds it. A file system without locks
    (some network mounts) runs unlocked rather than not at all.
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    if key in _HELD:
        fd, depth = _HELD[key]
        _HELD[key] = (fd, depth + 1)
        try:
            yield None
        finally:
            _release(key)
        return
    path = folder / LOCK_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if unwritable_cause(exc) is None:
            raise
        raise ReadOnlyFolder(f"run folder {folder} cannot be written ({unwritable_cause(exc)}) and this command "
                             "writes to it (its lock first): give it write access, or copy it to a writable place "
                             "and use the copy") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):  # no locking here (ENOLCK, EOPNOTSUPP): run unlocked
            yield None
            return
        raise RunBusy(f"run folder {folder} is in use by {describe(read_holder(path))}: wait for it to finish, "
                      "or use another run_dir") from None
    previous = read_holder(path)
    stale = previous if previous.get("pid") else None  # a clean release leaves the file empty
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder_info(command)) + "\n").encode(), 0)
    _HELD[key] = (fd, 1)
    try:
        yield stale
    finally:
        _release(key)


def _release(key: str) -> None:
    fd, depth = _HELD[key]
    if depth > 1:
        _HELD[key] = (fd, depth - 1)
        return
    del _HELD[key]
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # a released lock names no holder
    os.close(fd)  # closing drops the flock
