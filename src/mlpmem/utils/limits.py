"""The machine's limits as a writer meets them: a full disk (or quota, or file-size limit) and a folder that
cannot be written (a read-only file system, no permission), told apart from every other failure.

Light on purpose (no numpy): the CLI's guard reads it to print such a failure as one line, exit 2.
"""

from __future__ import annotations

import errno
import os

FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
FULL_WORDS = ("No space left on device", "StorageFull", "File too large", "FileTooLarge", "Disk quota exceeded")
"""How a writer that does not raise an ``OSError`` (safetensors' ``SafetensorError``) says the disk is full."""


def full_disk_cause(exc: BaseException) -> str | None:
    """Why ``exc`` is a full disk (a quota, a file-size limit), or None when it is another failure."""
    if isinstance(exc, OSError):
        if exc.errno in FULL:
            return os.strerror(exc.errno)
        if exc.errno is None and "written" in str(exc):  # numpy's short write
            return str(exc)
        return None
    words = [w for w in FULL_WORDS if w in str(exc)]
    return words[0] if words and type(exc).__name__ == "SafetensorError" else None


def unwritable_cause(exc: BaseException) -> str | None:
    """Why ``exc`` is a folder or file that cannot be written, or None when it is another failure."""
    return os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno in UNWRITABLE else None
