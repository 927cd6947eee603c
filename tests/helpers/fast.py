"""A fixture for tests that run whole tiny pipelines: no fsync, one thread (restored afterwards)."""

from __future__ import annotations

import pytest
import torch

import mlpmem.utils.shards


@pytest.fixture(autouse=True)
def quiet_and_fast(monkeypatch):
    """Import it into a test module to apply it to every test there."""
    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
