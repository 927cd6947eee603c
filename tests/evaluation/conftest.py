"""Fixtures of the lm-eval adapter's tests: a 3-item local task folder and a finished tiny run, once a session."""

from __future__ import annotations

import pytest

import mlpmem.utils.shards
from helpers.corpus import write_corpus
from helpers.harness import write_tasks
from mlpmem.cli import main


@pytest.fixture(scope="session")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    write_tasks(folder)
    return folder


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, tiny_backbone_dir):
    """A finished tiny run (``mlpmem run configs/tiny.yaml`` on the tiny backbone)."""
    root = tmp_path_factory.mktemp("run")
    corpus = write_corpus(root / "corpus", 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")
        assert main(["run", "configs/tiny.yaml", "--quiet", "--set", f"run_dir={root / 'run'}",
                     "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus}"]) == 0
    return root / "run"
