"""The ``memory:`` section of the pipeline: what the memory is (depth, width, head, initialisation).

How it is optimised is the ``train:`` section (:class:`mlpmem.training.config.TrainConfig`). The memory is
built from this section and the backbone by :func:`mlpmem.pipeline.train.build_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlpmem.config import Config
from mlpmem.errors import ConfigError


@dataclass
class MemorySection(Config):
    preset: Literal["tiny", "small", "base", "large"] = "tiny"
    """Depth preset: tiny (2 blocks), small (4), base (8, the paper's), large (15); widths are the backbone's.
    ``tiny`` is the default's measured best at a few hundred thousand training tokens
    (docs/results/default-ablations); a corpus many times larger may feed a deeper memory."""
    num_layers: int | None = None
    """Blocks, overriding the preset's depth."""
    intermediate_size: int | None = None
    """Feed-forward width of each block, overriding the backbone's."""
    tie_head: bool = True
    """Head = the backbone's output embedding, frozen (else an untied head trained from scratch)."""
    dropout: float = 0.0
    """Dropout on each block's feed-forward output while training (a regulariser for small corpora)."""
    vocab: Literal["full", "corpus"] = "corpus"
    """The tokens the head scores: ``full`` (the backbone's vocabulary) or ``corpus`` (the training corpus's next
    tokens, which include every teacher support; p_mem is 0 elsewhere, see :mod:`mlpmem.memory.vocab`)."""
    init: Literal["random", "backbone", "identity"] = "random"
    """``random``; ``backbone``: the blocks start as the backbone's MLPs above the key layer; ``identity``: every
    block starts as the identity (zeroed output projections) under the backbone's final norm and head, so a
    memory on the last layer's residual keys starts as the backbone itself."""

    def validate(self) -> None:
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{self._where('dropout')} must be in [0, 1), got {self.dropout}")
        for name in ("num_layers", "intermediate_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{self._where(name)} must be >= 1, got {value}")
