"""A finished tiny run built once per module, copied for each test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import mlpmem.utils.shards
from helpers.corpus import write_corpus
from mlpmem.cli import main

TINY = "configs/tiny.yaml"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_backbone_dir):
    """A finished tiny run (every stage) and the folder of its backbone."""
    root = tmp_path_factory.mktemp("finished")
    corpus = write_corpus(root / "corpus", 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")
        assert main(["run", TINY, "--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set",
                     f"corpus.path={corpus}", "--set", f"run_dir={root / 'run'}"]) == 0
    return root / "run"


@pytest.fixture()
def run_dir(finished, tmp_path) -> Path:
    """A copy of the finished run."""
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    return folder

