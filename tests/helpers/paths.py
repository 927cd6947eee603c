"""The repository's folders, for tests that read shipped configs or start subprocesses on the source tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
