"""Fixtures of the lm-eval adapter's tests: a 3-item local task folder and a finished tiny run, once a session."""

from __future__ import annotations

import pytest

from helpers.harness import write_tasks
from helpers.runs import finished_tiny_run


@pytest.fixture(scope="session")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    write_tasks(folder)
    return folder


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, tiny_backbone_dir):
    """A finished tiny run (``mlpmem run configs/tiny.yaml`` on the tiny backbone)."""
    return finished_tiny_run(tmp_path_factory.mktemp("run"), tiny_backbone_dir)
