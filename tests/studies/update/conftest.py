"""The session's finished tiny run, copied for each test (as in tests/maintenance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.runs import copy_run


@pytest.fixture()
def run_dir(tiny_run, tmp_path) -> Path:
    """A copy of the finished run."""
    return copy_run(tiny_run, tmp_path / "run")
