"""The CLI's guard: every failure is one line on stderr and an exit status that says which kind.

An :class:`~mlpmem.errors.MlpmemError` is the user's to fix and already names its cause; so is a limit of the
machine (a folder that cannot be written, a full disk: :func:`machine_limit`), exit 2 too. Anything else is
unexpected (a bug, or a failure mlpmem does not yet explain): the line says what failed, where (the innermost
frame of mlpmem's own code), and how to get the full traceback (``--debug``).
"""

from __future__ import annotations

import os
import traceback

from mlpmem.utils.limits import full_disk_cause, unwritable_cause

EXIT_CODES = {"ok": 0, "unexpected": 1, "error": 2, "busy": 3, "interrupted": 130}
"""0 done; 1 an unexpected failure (a bug: rerun with --debug and report it); 2 a usage, configuration, input or
artifact error; 3 the run folder is locked by another live command; 130 interrupted (Ctrl-C)."""


def machine_limit(exc: BaseException) -> str | None:
    """The one line of a failure that is the machine's, not mlpmem's (a read-only folder, no permission, a full
    disk) when a writer did not already name it; None for any other failure."""
    if unwritable_cause(exc) is not None:
        return (f"cannot write {exc.filename or 'a file'} ({unwritable_cause(exc)}): give its folder write access, "
                "or work on a copy in a writable place")
    cause = full_disk_cause(exc)
    if cause is not None:
        where = getattr(exc, "filename", None) or "a file"
        return f"disk full while writing {where} ({cause}): free space and rerun, finished work is kept"
    return None


def one_line(message: str) -> str:
    """``message`` on one line (a multi-line message from a library is joined)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip()) or "(no message)"


def where(exc: BaseException) -> str:
    """``file.py:line in function`` of the innermost frame inside the mlpmem package (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own = [f for f in frames if os.path.abspath(f.filename).startswith(package)]
    frame = (own or frames)[-1]
    return f"{os.path.relpath(frame.filename, os.path.dirname(package))}:{frame.lineno} in {frame.name}"


def unexpected(exc: BaseException, command: str) -> str:
    """The one line of an unexpected failure of ``command`` (its words as typed: ``mlpmem bench infer``)."""
    detail = one_line(str(exc))
    if len(detail) > 300:
        detail = detail[:297] + "..."
    return (f"`{command}` failed: {type(exc).__name__}: {detail} (at {where(exc)}); this is not a known "
            "input error: rerun with --debug for the traceback and report it")
