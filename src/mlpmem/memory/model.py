"""The MLP Memory: a stack of attention-free feed-forward blocks mapping a key to next-token logits.

The frozen backbone produces a key f(c_t) (hidden state at one decoder layer, see ``backbone.KeyHook``);
the memory maps it to logits over the vocabulary:

    x_0 = W_in f(c_t)                      (W_in only if hidden_size != input_size)
    x_l = x_{l-1} + FFN_l(Norm_l(x_{l-1}))  for l = 1..L   (no attention, no positions)
    logits = W_head Norm_f(x_L)             p_mem = softmax(logits)

Two block families mirror the two backbone families, so that a memory can be initialised from the
backbone's own feed-forward weights (:func:`init_from_backbone`):
  - ``llama``: RMSNorm + SwiGLU (gate/up/down, bias-free),
  - ``gpt2``: LayerNorm + GELU (c_fc/c_proj, with bias).
The head may be tied to the backbone's output embedding (:func:`tie_to_backbone`): then it is frozen,
shared with the backbone and never saved. Checkpoints are ``config.json`` + ``model.safetensors``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from mlpmem.backbone import (
    SITES,
    check_fingerprint,
    decoder_layers,
    feed_forward,
    fingerprint,
    resolve_layer,
)
from mlpmem.errors import ConfigError, CorruptArtifact

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

FAMILIES = ("llama", "gpt2")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
DEFAULT_ACTIVATION = {"llama": "silu", "gpt2": "gelu_tanh"}
DEFAULT_NORM_EPS = {"llama": 1e-6, "gpt2": 1e-5}
PRESET_LAYERS = {"tiny": 2, "small": 4, "base": 8, "large": 15}  # "base" is the paper's depth
INITS = ("random", "backbone")

# Hugging Face activation names -> ours (gelu_new and gelu_pytorch_tanh are the same tanh approximation)
HF_ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "relu": "relu",
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# Config


@dataclass
class MemoryConfig:
    """Shape and provenance of an MLP Memory.

    ``input_size`` is the key dimension d; ``hidden_size`` (default d) the width of the memory's residual
    stream; ``backbone``/``key_layer``/``key_site`` record which backbone and key the memory was built on.
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
    init: str = "random"
    init_std: float = 0.02
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
        if self.init not in INITS:
            raise ConfigError(f"memory init must be one of {INITS}, got {self.init!r}")
        if isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)) or not (
            0.0 < self.init_std < math.inf
        ):
            raise ConfigError(f"memory init_std must be a positive number, got {self.init_std!r}")
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
        layer = decoder_layers(model)[0]
        family = backbone_family(model)
        mlp = feed_forward(layer)
        intermediate = mlp.up_proj.out_features if family == "llama" else mlp.c_fc.nf
        emb = model.get_output_embeddings().weight  # (V, d)
        values = dict(
            input_size=int(emb.shape[1]),
            vocab_size=int(emb.shape[0]),
            intermediate_size=int(intermediate),
            family=family,
            activation=_backbone_activation(model),
            norm_eps=_backbone_norm_eps(model, family),
            backbone=fingerprint(model, tokenizer) if tokenizer is not None else None,
            key_layer=resolve_layer(model, key_layer),
            key_site=key_site,
        )
        values.update(overrides)
        return cls.preset(preset, **values)


def backbone_family(model: nn.Module) -> str:
    """``llama`` if the backbone's MLP is gate/up/down, ``gpt2`` if it is c_fc/c_proj, else ConfigError."""
    mlp = feed_forward(decoder_layers(model)[0])
    if all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        return "llama"
    if all(hasattr(mlp, n) for n in ("c_fc", "c_proj")):
        return "gpt2"
    raise ConfigError(f"unsupported backbone MLP {type(mlp).__name__}: expected gate/up/down or c_fc/c_proj")


def _backbone_activation(model: nn.Module) -> str:
    config = model.config
    name = getattr(config, "hidden_act", None) or getattr(config, "activation_function", None)
    if name not in HF_ACTIVATIONS:
        raise ConfigError(f"unsupported backbone activation {name!r}; supported: {tuple(HF_ACTIVATIONS)}")
    return HF_ACTIVATIONS[name]


def _backbone_norm_eps(model: nn.Module, family: str) -> float:
    config = model.config
    eps = getattr(config, "rms_norm_eps", None) if family == "llama" else getattr(config, "layer_norm_epsilon", None)
    return float(eps) if eps is not None else DEFAULT_NORM_EPS[family]


# ---------------------------------------------------------------------------------------------
# Modules


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in fp32 like Llama's."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., H)
        return self.weight * x.to(dtype)


def _activation(name: str) -> nn.Module:
    return {
        "silu": nn.SiLU(),
        "gelu": nn.GELU(),
        "gelu_tanh": nn.GELU(approximate="tanh"),
        "relu": nn.ReLU(),
    }[name]


class SwiGLU(nn.Module):
    """Llama feed-forward: down(act(gate(x)) * up(x)), bias-free."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act = _activation(config.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))  # (..., H)


class GeluMLP(nn.Module):
    """GPT-2 feed-forward: c_proj(act(c_fc(x))), with bias (nn.Linear, not GPT-2's transposed Conv1D)."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, config.intermediate_size)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = _activation(config.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))  # (..., H)


def _norm(config: MemoryConfig) -> nn.Module:
    if config.family == "llama":
        return RMSNorm(config.hidden_size, config.norm_eps)
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps)


class MemoryBlock(nn.Module):
    """x + FFN(Norm(x)): a transformer block without its attention."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        self.norm = _norm(config)
        self.mlp = SwiGLU(config) if config.family == "llama" else GeluMLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))  # (..., H)


class MLPMemory(nn.Module):
    """Maps keys f(c_t) of shape (..., d) to next-token logits (..., V); p_mem = softmax(logits)."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        self.config = config
        if config.hidden_size != config.input_size:
            self.in_proj = nn.Linear(config.input_size, config.hidden_size, bias=False)
        else:
            self.in_proj = nn.Identity()
        self.blocks = nn.ModuleList(MemoryBlock(config) for _ in range(config.num_layers))
        self.norm = _norm(config)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._tied = False
        self.reset_parameters()
        if config.tie_head:  # placeholder until tie_to_backbone() shares the backbone's embedding
            self.head.weight.requires_grad_(False)

    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights, zero biases, unit norms; residual outputs scaled by 1/sqrt(2L)."""
        std = self.config.init_std
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                scale = 1.0 / math.sqrt(2 * self.config.num_layers) if name.endswith(("down_proj", "c_proj")) else 1.0
                nn.init.normal_(module.weight, mean=0.0, std=std * scale)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (RMSNorm, nn.LayerNorm)):
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def features(self, keys: torch.Tensor) -> torch.Tensor:
        """The final-normed hidden state before the head: (..., d) -> (..., H)."""
        x = self.in_proj(keys.to(self.norm.weight.dtype))  # (..., H)
        for block in self.blocks:
            x = block(x)  # (..., H)
        return self.norm(x)  # (..., H)

    def forward(self, keys: torch.Tensor) -> torch.Tensor:
        """Next-token logits (..., V) of p_mem for keys (..., d)."""
        if self.config.tie_head and not self._tied:
            raise ConfigError("this memory has tie_head=True: call tie_to_backbone(memory, backbone) first")
        x = self.features(keys)  # (..., H)
        return self.head(x.to(self.head.weight.dtype))  # (..., V)

    def cast_weights(self, dtype: torch.dtype) -> MLPMemory:
        """Store the memory's own weights in ``dtype`` (e.g. bf16 for inference), in place; a tied head is
        the backbone's tensor and keeps its dtype. Norms still normalise in fp32 (see RMSNorm); the head
        runs in the head's dtype. Halving the bytes of the blocks halves what they add to a decode step."""
        for module in (self.in_proj, self.blocks, self.norm):
            module.to(dtype)
        if not self._tied:
            self.head.to(dtype)
        return self

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Parameter count (a tied head counts as a parameter but not as trainable)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    # -- checkpoints

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write ``config.json`` + ``model.safetensors`` atomically (a tied head is not stored).

        The files are written to a sibling temporary folder which then replaces ``directory`` whole, so a
        crash never leaves a partial save where a good one was. ``directory`` must be new, empty or a
        previous memory save (it is replaced, so it must not hold other files).
        """
        target = Path(directory)
        _check_replaceable(target)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            save_file(self._state_to_save(), str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
            (tmp / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n")
            for name in (WEIGHTS_NAME, CONFIG_NAME):
                _fsync(tmp / name)
            _swap_in(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    def _state_to_save(self) -> dict[str, torch.Tensor]:
        state = self.state_dict()
        if self.config.tie_head:
            state.pop("head.weight")
        return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        backbone_model: nn.Module | None = None,
        backbone_tokenizer=None,
    ) -> MLPMemory:
        """Load a save; verify the recorded backbone fingerprint against ``backbone_model`` if given.

        Without ``backbone_tokenizer`` the tokenizer part of the fingerprint is not checked. A tied head
        needs ``backbone_model``. Missing or corrupt files raise CorruptArtifact naming the file.
        """
        directory = Path(directory)
        config = _read_config(directory / CONFIG_NAME)
        if config.backbone is not None and backbone_model is not None:
            verify_backbone(config.backbone, backbone_model, backbone_tokenizer, f"memory {directory}")
        if config.tie_head and backbone_model is None:
            raise ConfigError(f"memory {directory} has a tied head: pass backbone_model to load it")
        memory = cls(config)
        state = _read_weights(directory / WEIGHTS_NAME)
        expected = set(memory._state_to_save())
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise CorruptArtifact(f"{directory / WEIGHTS_NAME}: missing tensors {missing}, unexpected {extra}")
        try:
            memory.load_state_dict(state, strict=False)
        except RuntimeError as exc:
            raise CorruptArtifact(f"{directory / WEIGHTS_NAME}: {_first_line(exc)}") from None
        if config.tie_head:
            tie_to_backbone(memory, backbone_model)
        return memory


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else type(exc).__name__)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _check_replaceable(target: Path) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError(f"cannot save a memory to {target}: it exists and is not a folder")
    foreign = sorted(p.name for p in target.iterdir() if p.name not in (CONFIG_NAME, WEIGHTS_NAME))
    if foreign:
        raise ConfigError(f"refusing to replace {target}: it holds other files ({', '.join(foreign[:3])})")


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an old ``target`` is moved aside first and deleted after."""
    old = target.with_name(f".{target.name}.old{os.getpid()}")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _read_config(path: Path) -> MemoryConfig:
    if not path.is_file():
        raise CorruptArtifact(f"{path} is missing")
    try:
        return MemoryConfig.from_dict(json.loads(path.read_text()))
    except (ValueError, UnicodeDecodeError) as exc:  # JSON errors and ConfigError are ValueErrors
        raise CorruptArtifact(f"{path}: invalid memory config ({_first_line(exc)})") from None


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CorruptArtifact(f"{path} is missing")
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers and truncation
        raise CorruptArtifact(f"{path}: unreadable safetensors file ({_first_line(exc)})") from None


class _NoTokenizer:
    """Stands in for a tokenizer when only the model part of a fingerprint can be checked."""

    def get_vocab(self) -> dict:
        return {}


def verify_backbone(expected: dict, model: nn.Module, tokenizer=None, what: str = "memory") -> None:
    """Raise FingerprintMismatch if ``model`` (and ``tokenizer`` when given) is not the recorded backbone."""
    if tokenizer is None:
        expected = {k: v for k, v in expected.items() if k != "tokenizer_sha"}
    check_fingerprint(expected, fingerprint(model, tokenizer or _NoTokenizer()), what)


# ---------------------------------------------------------------------------------------------
# Backbone initialisation and tying


def _backbone_final_norm(model: nn.Module) -> nn.Module | None:
    for path in ("model.norm", "transformer.ln_f", "gpt_neox.final_layer_norm", "model.decoder.final_layer_norm"):
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
        if isinstance(obj, nn.Module):
            return obj
    return None


def _init_layer_indices(num_backbone: int, num_memory: int, start: int) -> list[int]:
    if num_memory <= num_backbone:
        start = min(start, num_backbone - num_memory)  # shift the window left so that it fits
        return list(range(start, start + num_memory))
    return [(start + i) % num_backbone for i in range(num_memory)]  # deeper than the backbone: cycle


def _check_init_shapes(memory: MLPMemory, model: nn.Module) -> str:
    config = memory.config
    family = backbone_family(model)
    if family != config.family:
        raise ConfigError(f"cannot init a {config.family} memory from a {family} backbone")
    hidden = int(model.get_input_embeddings().weight.shape[1])
    mlp = feed_forward(decoder_layers(model)[0])
    inter = mlp.up_proj.out_features if family == "llama" else mlp.c_fc.nf
    if (config.hidden_size, config.intermediate_size) != (hidden, inter):
        raise ConfigError(
            f"memory widths (hidden {config.hidden_size}, intermediate {config.intermediate_size}) differ from "
            f"the backbone's (hidden {hidden}, intermediate {inter})"
        )
    if family == "llama" and mlp.up_proj.bias is not None:
        raise ConfigError("cannot init a bias-free llama memory from a backbone MLP with biases")
    return family


@torch.no_grad()
def init_from_backbone(memory: MLPMemory, backbone_model: nn.Module, start_layer: int | float) -> list[int]:
    """Copy the feed-forward blocks of consecutive backbone layers into the memory blocks.

    Memory block i gets the MLP weights and the post-attention norm (``post_attention_layernorm`` /
    ``ln_2``) of backbone layer ``start + i``. ``start_layer`` is resolved like a key layer (negative
    ints count from the end, floats are depth fractions). If the window ``[start, start + L)`` runs past
    the last backbone layer it is shifted left to end at the last layer; if the memory has more blocks
    than the backbone has layers, the layers are reused cyclically from ``start``. Also copies the
    backbone's final norm, and its output embedding into an untied head (as a trainable copy).
    Returns the backbone layer indices used and records ``init="backbone"`` in the config.
    """
    family = _check_init_shapes(memory, backbone_model)
    layers = decoder_layers(backbone_model)
    indices = _init_layer_indices(len(layers), memory.config.num_layers, resolve_layer(backbone_model, start_layer))
    for block, index in zip(memory.blocks, indices):
        src_layer = layers[index]
        src_norm = src_layer.post_attention_layernorm if family == "llama" else src_layer.ln_2
        _copy_norm(block.norm, src_norm)
        _copy_mlp(block.mlp, feed_forward(src_layer), family)
    final = _backbone_final_norm(backbone_model)
    if final is not None:
        _copy_norm(memory.norm, final)
    if not memory.config.tie_head:
        memory.head.weight.copy_(backbone_model.get_output_embeddings().weight)
    memory.config.init = "backbone"
    return indices


def _copy_norm(dst: nn.Module, src: nn.Module) -> None:
    dst.weight.copy_(src.weight)
    if getattr(dst, "bias", None) is None:
        return
    src_bias = getattr(src, "bias", None)
    if src_bias is None:
        dst.bias.zero_()
    else:
        dst.bias.copy_(src_bias)


def _copy_mlp(dst: nn.Module, src: nn.Module, family: str) -> None:
    if family == "llama":
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(dst, name).weight.copy_(getattr(src, name).weight)
        return
    for name in ("c_fc", "c_proj"):  # GPT-2 Conv1D stores weight as (in, out): transpose to Linear's (out, in)
        getattr(dst, name).weight.copy_(getattr(src, name).weight.t())
        getattr(dst, name).bias.copy_(getattr(src, name).bias)


def tie_to_backbone(memory: MLPMemory, backbone_model: nn.Module) -> MLPMemory:
    """Share the backbone's output embedding as the memory head (frozen, not saved); sets ``tie_head``.

    The shared Parameter gets ``requires_grad=False``, which also freezes it in the backbone (the
    backbone of MLP Memory is frozen anyway).
    """
    weight = backbone_model.get_output_embeddings().weight
    expected = (memory.config.vocab_size, memory.config.hidden_size)
    if tuple(weight.shape) != expected:
        raise ConfigError(
            f"cannot tie the memory head {expected} to the backbone output embedding {tuple(weight.shape)}"
        )
    weight.requires_grad_(False)
    memory.head.weight = weight
    memory.config.tie_head = True
    memory._tied = True
    return memory
