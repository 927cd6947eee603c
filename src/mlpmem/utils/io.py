"""Files: the cache root, atomic writes and swaps, checksums, JSON Lines, folder sizes."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Folder for converted models and prepared corpora (``$MLPMEM_CACHE`` or ``~/.cache/mlpmem``)."""
    return Path(os.environ.get("MLPMEM_CACHE", Path.home() / ".cache" / "mlpmem"))
