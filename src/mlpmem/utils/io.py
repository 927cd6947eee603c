"""Files: the cache root, atomic writes and swaps, removing only what mlpmem wrote, JSON Lines, folder sizes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    """Folder for converted models and prepared corpora (``$MLPMEM_CACHE`` or ``~/.cache/mlpmem``)."""
    return Path(os.environ.get("MLPMEM_CACHE", Path.home() / ".cache" / "mlpmem"))


def fsync_file(path: Path) -> None:
    """Flush a written file to the disk, so that a rename after it survives a power loss."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def replace_dir(tmp: Path, target: Path, old: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target``; an existing ``target`` is first renamed to ``old`` and
    deleted after, so ``target`` is always either the previous folder or the new one, never a mix."""
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (the same bytes, no copy), or a copy where links are impossible
    (another file system). Safe to share: mlpmem replaces files through temporaries, never writes them in place."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def remove_written(folder: Path, is_written: Callable[[str], bool]) -> list[str]:
    """Delete the entries of ``folder`` whose names ``is_written`` says mlpmem wrote (folders whole), then
    ``folder`` itself if nothing else is left; return the names kept (the user's own files)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    kept = []
    for path in sorted(folder.iterdir()):
        if not is_written(path.name):
            kept.append(path.name)
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if not kept:
        folder.rmdir()
    return kept


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSON Lines file (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Write ``rows`` one JSON object a line (UTF-8 kept as is), creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def dir_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
