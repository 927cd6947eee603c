"""The shape and provenance of an MLP Memory: :class:`MemoryConfig`, its allowed values and named depths.

A config is checked when it is built (a bad value raises ConfigError naming the field), fills in the
family's defaults (activation, norm eps), and round-trips through ``to_dict`` / ``from_dict`` (the
``config.json`` of a save). :meth:`MemoryConfig.from_backbone` sizes one like a backbone, reading the
backbone's family, widths, activation and norm eps through :mod:`mlpmem.memory.init`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from torch import nn

from mlpmem.backbone import SITES, fingerprint, resolve_layer
from mlpmem.errors import ConfigError
from mlpmem.memory.init import backbone_activation, backbone_family, backbone_intermediate_size, backbone_norm_eps

FAMILIES = ("llama", "gpt2")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
DEFAULT_ACTIVATION = {"llama": "silu", "gpt2": "gelu_tanh"}
DEFAULT_NORM_EPS = {"llama": 1e-6, "gpt2": 1e-5}
PRESET_LAYERS = {"tiny": 2, "small": 4, "base": 8, "large": 15}  # "base" is the paper's depth
INITS = ("random", "backbone", "identity")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class MemoryConfig:
    """Shape and provenance of an MLP Memory.

    ``input_size`` is the key dimension d; ``hidden_size`` (default d) the width of the memory's residual
    stream; ``head_vocab_size`` (default: all ``vocab_size`` tokens) how many tokens the head scores;
    ``backbone``/``key_layer``/``key_site`` record which backbone and key the memory was built on.
    """

    input_size: int
    vocab_size: int
    intermediate_size: int
    num_layers: int = PRESET_LAYERS["base"]
    hidden_size: int | None = None  # None -> input_size (no input projection)
    family: str = "llama"
    activation: str | None = None  # None -> the family's default (silu / gelu_tanh)
    norm_eps: float | None = None  # None -> the family's default (1e-6 / 1e-5)
    tie_head: bool = False
    head_vocab_size: int | None = None  # None -> the full vocabulary; else a corpus head (mlpmem.memory.vocab)
    init: str = "random"
    init_std: float = 0.02
    dropout: float = 0.0  # on each block's feed-forward output, while training only
    backbone: dict | None = None
    key_layer: int | None = None
    key_site: str | None = None

    def __post_init__(self) -> None:
        for name in ("input_size", "vocab_size", "intermediate_size", "num_layers"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"memory {name} must be a positive int, got {value!r}")
        if self.family not in FAMILIES:
            raise ConfigError(f"memory family must be one of {FAMILIES}, got {self.family!r}")
        if self.hidden_size is None:
            self.hidden_size = self.input_size
        if not _is_int(self.hidden_size) or self.hidden_size < 1:
            raise ConfigError(f"memory hidden_size must be a positive int, got {self.hidden_size!r}")
        self.activation = self.activation or DEFAULT_ACTIVATION[self.family]
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"memory activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        self.norm_eps = DEFAULT_NORM_EPS[self.family] if self.norm_eps is None else self.norm_eps
        if isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float)) or not (
            0.0 < self.norm_eps < 1.0
        ):
            raise ConfigError(f"memory norm_eps must be in (0, 1), got {self.norm_eps!r}")
        self.norm_eps = float(self.norm_eps)
        if not isinstance(self.tie_head, bool):
            raise ConfigError(f"memory tie_head must be a bool, got {self.tie_head!r}")
        if self.head_vocab_size is not None and (
            not _is_int(self.head_vocab_size) or not 1 <= self.head_vocab_size <= self.vocab_size
        ):
            raise ConfigError(f"memory head_vocab_size must be an int in [1, vocab_size={self.vocab_size}] or None, "
                              f"got {self.head_vocab_size!r}")
        if self.init not in INITS:
            raise ConfigError(f"memory init must be one of {INITS}, got {self.init!r}")
        if isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)) or not (
            0.0 < self.init_std < math.inf
        ):
            raise ConfigError(f"memory init_std must be a positive number, got {self.init_std!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ConfigError(f"memory dropout must be in [0, 1), got {self.dropout!r}")
        self.dropout = float(self.dropout)
        self._check_provenance()

    def _check_provenance(self) -> None:
        if self.key_layer is not None and (not _is_int(self.key_layer) or self.key_layer < 0):
            raise ConfigError(f"memory key_layer must be a non-negative int or None, got {self.key_layer!r}")
        if self.key_site is not None and self.key_site not in SITES:
            raise ConfigError(f"memory key_site must be one of {SITES} or None, got {self.key_site!r}")
        if self.backbone is None:
            return
        if not isinstance(self.backbone, dict):
            raise ConfigError(f"memory backbone must be a fingerprint dict or None, got {type(self.backbone).__name__}")
        for name, key in (("vocab_size", "vocab_size"), ("input_size", "hidden_size")):
            expected = self.backbone.get(key)
            if expected is not None and expected != getattr(self, name):
                raise ConfigError(
                    f"memory {name}={getattr(self, name)} differs from its backbone's {key}={expected}"
                )

    # -- serialisation

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MemoryConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"memory config must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown memory config keys: {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required key is missing
            raise ConfigError(f"incomplete memory config: {exc}") from None

    # -- constructors

    @classmethod
    def preset(
        cls,
        name: str,
        input_size: int,
        vocab_size: int,
        intermediate_size: int,
        family: str = "llama",
        **overrides,
    ) -> MemoryConfig:
        """A named depth ("tiny" 2, "small" 4, "base" 8, "large" 15 blocks) at the backbone's widths."""
        if name not in PRESET_LAYERS:
            raise ConfigError(f"unknown memory preset {name!r}; choose one of {tuple(PRESET_LAYERS)}")
        values = dict(
            input_size=input_size,
            vocab_size=vocab_size,
            intermediate_size=intermediate_size,
            num_layers=PRESET_LAYERS[name],
            family=family,
        )
        values.update(overrides)
        return cls.from_dict(values)

    @classmethod
    def from_backbone(
        cls,
        model: nn.Module,
        preset: str = "base",
        key_layer: int | float = -1,
        key_site: str = "ffn_input",
        tokenizer=None,
        **overrides,
    ) -> MemoryConfig:
        """A preset sized like ``model`` (family, widths, activation and norm eps read from it).

        The backbone fingerprint is recorded only when ``tokenizer`` is given (it is part of it).
        """
        if key_site not in SITES:
            raise ConfigError(f"key_site must be one of {SITES}, got {key_site!r}")
        family = backbone_family(model)
        emb = model.get_output_embeddings().weight  # (V, d)
        eps = backbone_norm_eps(model, family)
        values = dict(
            input_size=int(emb.shape[1]),
            vocab_size=int(emb.shape[0]),
            intermediate_size=backbone_intermediate_size(model, family),
            family=family,
            activation=backbone_activation(model),
            norm_eps=DEFAULT_NORM_EPS[family] if eps is None else eps,
            backbone=fingerprint(model, tokenizer) if tokenizer is not None else None,
            key_layer=resolve_layer(model, key_layer),
            key_site=key_site,
        )
        values.update(overrides)
        return cls.preset(preset, **values)
