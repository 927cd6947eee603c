"""Dropout: only while training, and its probability checked."""

from __future__ import annotations

import pytest
import torch

from mlpmem.errors import ConfigError
from mlpmem.memory import MemoryConfig, MLPMemory


def test_dropout_only_while_training():
    memory = MLPMemory(MemoryConfig(input_size=16, vocab_size=20, intermediate_size=32, tie_head=False, dropout=0.5))
    keys = torch.randn(8, 16)
    memory.eval()
    assert torch.equal(memory(keys), memory(keys))
    memory.train()
    assert not torch.equal(memory(keys), memory(keys))
    with pytest.raises(ConfigError, match="dropout"):
        MemoryConfig(input_size=16, vocab_size=20, intermediate_size=32, tie_head=False, dropout=1.0)
