"""Shared fixtures: a tiny BPE tokenizer, tiny random Llama / GPT-2 backbones built by ``helpers.tiny``."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")

import random

import pytest
import torch

from helpers.tiny import bpe_tokenizer, tiny_backbone


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


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    random.seed(0)


@pytest.fixture()
def subprocess_stage_env(monkeypatch):
    """For tests that run stages in worker subprocesses: no fsync (MLPMEM_FSYNC=0: a kill keeps the page cache,
    and fsync on a busy disk costs seconds per file) and one thread everywhere (tiny models; no oversubscription
    between the test process and its workers)."""
    import mlpmem.utils.shards

    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_FSYNC", "0")
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

