"""Shared fixtures: a tiny BPE tokenizer, tiny random Llama / GPT-2 backbones built by ``helpers.tiny``, and a
finished tiny run."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # `make test`'s worker processes share the cores equally
    _share = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("MLPMEM_THREADS", str(max(1, _share)))

import random

import pytest
import torch

from helpers.runs import finished_tiny_run, tree_state
from helpers.tiny import bpe_tokenizer, tiny_backbone
from mlpmem.utils.runtime import set_threads

set_threads()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return bpe_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer):
    return tiny_backbone("llama", vocab_size=len(tiny_tokenizer), preset="bpe")


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_tokenizer):
    return tiny_backbone("gpt2", vocab_size=len(tiny_tokenizer), preset="bpe")


@pytest.fixture(scope="session")
def tiny_backbone_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """A tiny Llama saved as a local folder, loadable by name with ``load_backbone``."""
    path = tmp_path_factory.mktemp("backbone")
    tiny_llama.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_backbone_dir):
    """A finished tiny run (``helpers.runs.finished_tiny_run``), built once a session and shared by the tests that
    read one; a test that changes a run works on a copy (``helpers.runs.copy_run``). Checked unchanged at the end."""
    run = finished_tiny_run(tmp_path_factory.mktemp("tiny-run"), tiny_backbone_dir)
    before = tree_state(run)
    yield run
    assert tree_state(run) == before, "a test changed the shared tiny run: it should change a copy (copy_run)"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    random.seed(0)


@pytest.fixture()
def subprocess_stage_env(monkeypatch):
    """For tests that run stages in worker subprocesses: no fsync (MLPMEM_FSYNC=0: a kill keeps the page cache,
    and fsync on a busy disk costs seconds per file), one thread everywhere (tiny models; no oversubscription
    between the test process and its workers) and the CPU alone: these tests compare N CPU processes (gloo) with
    one, bit for bit, also on a machine with one GPU (where N processes could not each have their own)."""
    import mlpmem.utils.shards

    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_FSYNC", "0")
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

