"""A finished tiny run built once per module, copied for each test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.runs import finished_tiny_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_backbone_dir):
    """A finished tiny run (every stage) and the folder of its backbone."""
    return finished_tiny_run(tmp_path_factory.mktemp("finished"), tiny_backbone_dir)


@pytest.fixture()
def run_dir(finished, tmp_path) -> Path:
    """A copy of the finished run."""
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    return folder

