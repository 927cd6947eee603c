"""Simulated interruptions: a stage killed after its first shard is written."""

import contextlib

import pytest


@contextlib.contextmanager
def killed_after_first_shard(monkeypatch, module, name: str = "write_shard"):
    """``module.name`` writes one shard, then raises KeyboardInterrupt; the block must be interrupted by it. The
    real function is back in place afterwards (so that the build can resume)."""
    real, calls = getattr(module, name), []

    def dying(*args):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(module, name, dying)
    with pytest.raises(KeyboardInterrupt):
        yield
    monkeypatch.setattr(module, name, real)
