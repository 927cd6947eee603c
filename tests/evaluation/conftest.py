"""Fixtures of the lm-eval adapter's tests: a 3-item local task folder and the session's finished tiny run."""

from __future__ import annotations

import pytest

from helpers.harness import write_tasks


@pytest.fixture(scope="session")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    write_tasks(folder)
    return folder


@pytest.fixture()
def run_dir(tiny_run):
    """The session's finished tiny run (``mlpmem run tiny`` on the tiny backbone), read only."""
    return tiny_run
