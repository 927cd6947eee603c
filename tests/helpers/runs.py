"""A finished tiny pipeline run, built once by the fixtures that need one (no fsync, one thread)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

import mlpmem.utils.shards
from helpers.corpus import write_corpus
from mlpmem.cli import main

TINY = "tiny"


def finished_tiny_run(root: Path, backbone_dir: str | Path, documents: int = 10) -> Path:
    """``mlpmem run tiny`` on the tiny backbone over a ``documents``-document corpus, in ``root/run``."""
    corpus = write_corpus(root / "corpus", documents)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")
        assert main(["run", TINY, "--quiet", "--set", f"backbone.name={backbone_dir}", "--set",
                     f"corpus.path={corpus}", "--set", f"run_dir={root / 'run'}"]) == 0
    return root / "run"


def corpus_of(run: Path) -> Path:
    """The corpus folder ``finished_tiny_run`` wrote beside ``run``."""
    return run.parent / "corpus"


def copy_run(run: Path, folder: Path, link_shards: bool = False) -> Path:
    """A copy of ``run`` in ``folder`` (a test that changes a run works on its copy), its ``config.yaml`` naming the
    copy as its run folder, so that commands given that file work on the copy. ``link_shards``: the ``.npy`` files
    hard-linked, not copied (mlpmem never writes one in place: it writes a temporary and renames it)."""
    shutil.copytree(run, folder, copy_function=_link_shards if link_shards else shutil.copy2)
    config = folder / "config.yaml"
    if config.is_file():
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "run_dir": str(folder)},
                                         sort_keys=False))
    return folder


def _link_shards(src: str, dst: str) -> None:
    os.link(src, dst) if src.endswith(".npy") else shutil.copy2(src, dst)


def tree_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (but a lock) with its size and modification time: what a reader leaves as it was."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def overridden(base: list[str], argv: list[str]) -> list[str]:
    """``base`` without its ``--set`` of the keys that ``argv`` sets (a key given twice is refused)."""
    keys = {argv[i + 1].split("=")[0] for i, word in enumerate(argv) if word == "--set"}
    drop = {i for i, word in enumerate(base) if word == "--set" and base[i + 1].split("=")[0] in keys}
    return [word for i, word in enumerate(base) if i not in drop and i - 1 not in drop]
