"""The memory's one configuration, :class:`MemoryConfig`: the pipeline's ``memory:`` section and a save's
``config.json``.

Its first fields are what a user chooses (depth, widths, the blocks' activation and norm, the head, the
initialisation); the last ones are recorded when the memory is sized for a backbone
(:func:`mlpmem.memory.sizing.size_for_backbone`): the key width, the vocabulary, the corpus head's size and the
backbone's fingerprint and key layer / site. A YAML file leaves those unset. Every field is checked against
its type when the config is built (:class:`mlpmem.config.Config`), then :meth:`MemoryConfig.validate` checks the
values.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from mlpmem.config import Config
from mlpmem.errors import ConfigError

PRESET_LAYERS = {"tiny": 2, "small": 4, "base": 8, "large": 15}  # "base" is the paper's depth
Preset = Literal["tiny", "small", "base", "large"]
Init = Literal["random", "backbone"]
Activation = Literal["silu", "gelu", "gelu_tanh", "relu"]
INITS = typing.get_args(Init)
ACTIVATIONS = typing.get_args(Activation)


@dataclass
class MemoryConfig(Config):
    """What the memory is: depth, widths, blocks, head and initialisation (how it is optimised is ``train:``)."""

    preset: Preset = "tiny"
    """Depth preset: tiny (2 blocks), small (4), base (8, the paper's), large (15). ``tiny`` is the default's
    measured best at a few hundred thousand training tokens (docs/results/default-ablations)."""
    num_layers: int | None = None
    """Blocks, overriding the preset's depth."""
    hidden_size: int | None = None
    """Width of the memory's residual stream; unset: the key width (no input projection)."""
    intermediate_size: int | None = None
    """Feed-forward width of each block; unset: the backbone's feed-forward width where its config names one
    (``intermediate_size``, ``n_inner``, ``ffn_dim``, ``ffn_hidden_size``), else 4 × the key width."""
    mlp: Literal["gated", "plain"] = "gated"
    """Each block's feed-forward: ``gated`` = down(act(gate(x)) · up(x)), bias-free (SwiGLU with ``silu``);
    ``plain`` = down(act(up(x))) with biases (GPT-2's)."""
    activation: Activation = "silu"
    """The feed-forward's activation (``gelu_tanh`` is the tanh approximation)."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """The blocks' and the final norm: RMSNorm, or LayerNorm with a bias."""
    norm_eps: float = 1e-5
    """The norms' epsilon."""
    tie_head: bool = True
    """Head = the backbone's output embedding, frozen and never saved (else an untied head trained from
    scratch)."""
    vocab: Literal["full", "corpus"] = "corpus"
    """The tokens the head scores: ``full`` (the backbone's vocabulary) or ``corpus`` (the training corpus's next
    tokens, which include every teacher support; p_mem is 0 elsewhere, see :mod:`mlpmem.memory.vocab`)."""
    init: Init = "random"
    """``random``; ``backbone``: the blocks start as the backbone's MLPs above the key layer (its block kind,
    activation, norms and widths replace the options above)."""
    init_std: float = 0.02
    """Standard deviation of the random initial weights."""
    dropout: float = 0.0
    """Dropout on each block's feed-forward output while training (a regulariser for small corpora)."""
    input_size: int | None = None
    """Recorded when sized for a backbone: the key width d."""
    vocab_size: int | None = None
    """Recorded when sized for a backbone: the backbone's vocabulary V."""
    head_vocab_size: int | None = None
    """Recorded when sized for a backbone: the rows of a corpus head (unset: a full head)."""
    backbone: dict | None = None
    """Recorded when sized for a backbone: its fingerprint."""
    key_layer: int | None = None
    """Recorded when sized for a backbone: the key layer's index."""
    key_site: Literal["ffn_input", "residual"] | None = None
    """Recorded when sized for a backbone: the key site."""

    def validate(self) -> None:
        for name in ("num_layers", "hidden_size", "intermediate_size", "input_size", "vocab_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{self._where(name)} must be >= 1, got {value}")
        if not 0.0 < self.norm_eps < 1.0:
            raise ConfigError(f"{self._where('norm_eps')} must be in (0, 1), got {self.norm_eps}")
        if not self.init_std > 0.0:
            raise ConfigError(f"{self._where('init_std')} must be positive, got {self.init_std}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{self._where('dropout')} must be in [0, 1), got {self.dropout}")
        if self.key_layer is not None and self.key_layer < 0:
            raise ConfigError(f"{self._where('key_layer')} must be a resolved index >= 0, got {self.key_layer}")
        self._check_head_vocab()
        self._check_provenance()

    def _check_head_vocab(self) -> None:
        if self.head_vocab_size is None:
            return
        if self.vocab == "full":
            raise ConfigError(f"{self._where('head_vocab_size')} is set but vocab is 'full'")
        if self.vocab_size is None or not 1 <= self.head_vocab_size <= self.vocab_size:
            raise ConfigError(f"{self._where('head_vocab_size')} must be in [1, vocab_size={self.vocab_size}], "
                              f"got {self.head_vocab_size}")

    def _check_provenance(self) -> None:
        if self.backbone is None:
            return
        for name, key in (("vocab_size", "vocab_size"), ("input_size", "hidden_size")):
            expected = self.backbone.get(key)
            if expected is not None and getattr(self, name) is not None and expected != getattr(self, name):
                raise ConfigError(f"{self._where(name)}={getattr(self, name)} differs from its backbone's "
                                  f"{key}={expected}")

    @property
    def depth(self) -> int:
        """The number of blocks: ``num_layers``, else the preset's."""
        return self.num_layers if self.num_layers is not None else PRESET_LAYERS[self.preset]

    @property
    def width(self) -> int:
        """The residual stream's width: ``hidden_size``, else the key width."""
        return self.hidden_size if self.hidden_size is not None else self.input_size

    def check_sized(self) -> None:
        """Raise a one-line error unless the widths a memory is built with are known."""
        missing = [n for n in ("input_size", "vocab_size", "intermediate_size") if getattr(self, n) is None]
        if missing:
            raise ConfigError(f"memory config has no {', '.join(missing)}: size it for its backbone first "
                              "(mlpmem.memory.size_for_backbone) or give them")
