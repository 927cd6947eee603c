"""Files a command writes where its user says (``explain --html``, ``summarize --out``, ``compare --out``; the
copies of ``summarize --copy-reports`` are checked against the record of earlier copies instead).

Each path is checked before any work: a folder where a file is wanted, or a file where a folder is wanted, is one
line; and a file already there is replaced only when it is one mlpmem writes under that name (it opens with that
kind's own first bytes, its signature). Any other file is the user's: refused in one line, never written over.
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.utils.shards import atomic_write_bytes

PNG = b"\x89PNG\r\n\x1a\n"
"""Every figure mlpmem writes is a PNG."""


def _existing_parent(path: Path) -> Path:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def check_output_file(path: str | Path, option: str, signature: bytes) -> Path:
    """``path`` where ``option`` writes one file whose content opens with ``signature``, refused in one line if it is
    a folder, lies under a file, or is a file of other content."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder: give the path of the file to write")
    parent = _existing_parent(path)
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
    if path.exists() and not opens_with(path, signature):
        raise ConfigError(f"{option} {path}: refusing to replace it, it is not an earlier output of {option}: give a "
                          "new path, or move that file away first")
    return path


def check_output_folder(path: str | Path, option: str) -> Path:
    """``path`` where ``option`` writes files, refused in one line if it or a folder above it is a file."""
    path = Path(path)
    parent = path if path.exists() else _existing_parent(path)
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
    return path


def opens_with(path: Path, signature: bytes) -> bool:
    with path.open("rb") as f:
        return f.read(len(signature)) == signature


def write_output(path: Path, data: bytes) -> Path:
    """``data`` into ``path`` (checked by :func:`check_output_file`), its folder made, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    return path
