"""Key noise and dropout: seeded by (seed, step), the same rows get the same noise however a batch is split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlpmem.errors import ConfigError
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.training.config import TrainConfig
from mlpmem.training.regularise import noisy_keys


def test_noise_is_relative_seeded_and_split_invariant():
    rows = np.array([7, 2, 9, 4])
    keys = torch.randn(4, 64)
    order = np.argsort(rows)  # batch() sorts its rows
    whole = noisy_keys(keys[order], rows, rows, 0.1, seed=3, step=5)
    assert torch.equal(whole, noisy_keys(keys[order], rows, rows, 0.1, seed=3, step=5))
    assert not torch.equal(whole, noisy_keys(keys[order], rows, rows, 0.1, seed=3, step=6))
    rel = (whole - keys[order]).norm(dim=1) / keys[order].norm(dim=1)
    assert ((rel > 0.05) & (rel < 0.2)).all()  # about 0.1 of the key's norm
    for rank in range(2):  # two processes, every 2nd row each: the same noise on the same rows
        mine = rows[rank::2]
        sub = np.sort(mine)
        part = noisy_keys(keys[order][np.searchsorted(np.sort(rows), sub)], rows, mine, 0.1, seed=3, step=5)
        torch.testing.assert_close(part, whole[np.searchsorted(np.sort(rows), sub)])
    assert noisy_keys(keys, rows, rows, 0.0, 0, 0) is keys


def test_dropout_only_while_training():
    memory = MLPMemory(MemoryConfig(input_size=16, vocab_size=20, intermediate_size=32, tie_head=False, dropout=0.5))
    keys = torch.randn(8, 16)
    memory.eval()
    assert torch.equal(memory(keys), memory(keys))
    memory.train()
    assert not torch.equal(memory(keys), memory(keys))
    with pytest.raises(ConfigError, match="dropout"):
        MemoryConfig(input_size=16, vocab_size=20, intermediate_size=32, tie_head=False, dropout=1.0)
    with pytest.raises(ConfigError, match="key_noise"):
        TrainConfig(key_noise=-0.1)
