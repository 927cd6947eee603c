"""What a memory reads from its backbone, and nothing more: :func:`size_for_backbone`.

A memory with ``init: random`` needs the key width, the vocabulary and, for a tied head, the output embedding;
its blocks are its own (``memory.mlp`` / ``activation`` / ``norm``), whatever the backbone's family. Only
``init: backbone`` mirrors the backbone's blocks and its final norm: :func:`read_block` and
:func:`read_norm` read them and check by a probe that the memory's block computes exactly what the backbone's
does, so a family whose blocks the memory cannot mirror is a one-line error naming it and ``init: random``.
An output scaling the family applies to its logits (a soft-cap, a logit scale) is not applied to the memory's
own logits: :func:`unhonoured_scaling` names it, and the build warns once.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from mlpmem.backbone import SITES, decoder_layers, feed_forward, fingerprint, resolve_layer
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.memory.blocks import make_mlp, make_norm
from mlpmem.memory.config import MemoryConfig

HF_ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "relu": "relu",
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
}
"""Hugging Face activation names -> the memory's (gelu_new, gelu_pytorch_tanh and gelu_fast are the tanh form)."""
ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function", "activation")
FFN_WIDTH_KEYS = ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
SCALING_KEYS = {"final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0}
"""Config keys of an output scaling on the backbone's logits, with their neutral value."""
FINAL_NORMS = ("model.norm", "transformer.ln_f", "gpt_neox.final_layer_norm", "model.decoder.final_layer_norm")
PRE_FFN_NORMS = ("post_attention_layernorm", "ln_2")
POST_FFN_NORMS = ("pre_feedforward_layernorm", "post_feedforward_layernorm")


def family(model: nn.Module) -> str:
    return str(getattr(model.config, "model_type", type(model).__name__))


def backbone_activation(model: nn.Module) -> str | None:
    """The backbone's feed-forward activation in the memory's names, or None if its config names none we have."""
    for key in ACTIVATION_KEYS:
        name = getattr(model.config, key, None)
        if isinstance(name, str):
            return HF_ACTIVATIONS.get(name)
    return None


def ffn_width(model: nn.Module, key_width: int) -> int:
    """The backbone's feed-forward width where its config names one, else 4 × the key width."""
    for key in FFN_WIDTH_KEYS:
        value = getattr(model.config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 4 * key_width


def unhonoured_scaling(model: nn.Module) -> list[str]:
    """The output scalings of the backbone's logits (``key=value``) that the memory's logits do not apply."""
    found = []
    for key, neutral in SCALING_KEYS.items():
        value = getattr(model.config, key, neutral)
        if value is not None and value != neutral:
            found.append(f"{key}={value}")
    return found


# ---------------------------------------------------------------------------------------------
# Mirroring the backbone's blocks and final norm (init: backbone)


@dataclass
class Mirror:
    """What a memory block copies from one backbone layer: its norm and feed-forward, in the memory's layout."""

    norm: str
    norm_eps: float
    norm_state: dict[str, torch.Tensor]
    mlp: str
    activation: str
    mlp_state: dict[str, torch.Tensor]

    @property
    def intermediate_size(self) -> int:
        return int(self.mlp_state["down_proj.weight" if self.mlp == "gated" else "c_proj.weight"].shape[1])


def _refuse(model: nn.Module, init: str, why: str) -> ConfigError:
    return ConfigError(f"memory.init={init} cannot mirror a {family(model)} backbone ({why}); use memory.init: random")


def _linear(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight (out, in), bias) of an nn.Linear or of GPT-2's transposed Conv1D."""
    weight = module.weight.detach()
    return (weight.t() if type(module).__name__ == "Conv1D" else weight), module.bias


def _mlp_state(mlp: nn.Module) -> tuple[str, dict[str, torch.Tensor]] | None:
    names = set(dict(mlp.named_children()))
    if {"gate_proj", "up_proj", "down_proj"} <= names:
        parts = {n: _linear(getattr(mlp, n)) for n in ("gate_proj", "up_proj", "down_proj")}
    elif {"gate_up_proj", "down_proj"} <= names:  # Phi-3: gate and up stacked in one matrix
        gate_up, bias = _linear(mlp.gate_up_proj)
        gate, up = gate_up.chunk(2, dim=0)
        parts = {"gate_proj": (gate, bias), "up_proj": (up, bias), "down_proj": _linear(mlp.down_proj)}
    else:
        pair = next(((a, b) for a, b in (("c_fc", "c_proj"), ("dense_h_to_4h", "dense_4h_to_h"), ("fc_in", "fc_out"))
                     if {a, b} <= names), None)
        if pair is None:
            return None
        (w_in, b_in), (w_out, b_out) = _linear(getattr(mlp, pair[0])), _linear(getattr(mlp, pair[1]))
        zero = torch.zeros
        return "plain", {"c_fc.weight": w_in, "c_fc.bias": zero(w_in.shape[0]) if b_in is None else b_in.detach(),
                         "c_proj.weight": w_out,
                         "c_proj.bias": zero(w_out.shape[0]) if b_out is None else b_out.detach()}
    if any(bias is not None for _, bias in parts.values()):
        return None
    return "gated", {f"{n}.weight": w for n, (w, _) in parts.items()}


def read_norm(module: nn.Module | None) -> tuple[str, float, dict[str, torch.Tensor]] | None:
    """(kind, eps, state) of a memory norm that computes exactly what ``module`` does, or None (checked by a probe)."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1:
        return None
    eps = next((float(v) for v in (getattr(module, n, None) for n in ("eps", "variance_epsilon", "epsilon"))
                if isinstance(v, (int, float))), None)
    if eps is None or not 0.0 < eps < 1.0:
        return None
    kind = "layernorm" if isinstance(module, nn.LayerNorm) or getattr(module, "bias", None) is not None else "rmsnorm"
    for scale in (weight.detach(), 1.0 + weight.detach()):  # Gemma's RMSNorm scales by (1 + weight)
        state = {"weight": scale}
        if kind == "layernorm":
            bias = getattr(module, "bias", None)
            state["bias"] = torch.zeros_like(weight) if bias is None else bias.detach()
        ours = make_norm(kind, weight.shape[0], eps).to(weight.device, weight.dtype)
        ours.load_state_dict(state)
        if _same(ours, module, weight.shape[0], weight):
            return kind, eps, state
    return None


def _same(ours: nn.Module, theirs: nn.Module, width: int, like: torch.Tensor) -> bool:
    probe = torch.randn(3, width, generator=torch.Generator().manual_seed(0)).to(like.device, like.dtype)  # (3, H)
    with torch.no_grad():
        try:
            expected = theirs(probe)
        except Exception:  # a module that does not take a plain tensor is not one we can mirror
            return False
        expected = expected[0] if isinstance(expected, tuple) else expected
        return isinstance(expected, torch.Tensor) and torch.allclose(ours(probe), expected, rtol=1e-4, atol=1e-5)


def read_block(model: nn.Module, index: int, init: str = "backbone") -> Mirror:
    """The norm and feed-forward of backbone layer ``index`` as a memory block's, checked by a probe; a layer
    the memory's blocks cannot mirror is a one-line error naming the family and ``init: random``."""
    layer = decoder_layers(model)[index]
    if any(hasattr(layer, n) for n in POST_FFN_NORMS):
        raise _refuse(model, init, "its feed-forward output is normed too")
    src_norm = next((getattr(layer, n) for n in PRE_FFN_NORMS if isinstance(getattr(layer, n, None), nn.Module)), None)
    norm = read_norm(src_norm)
    if norm is None:
        raise _refuse(model, init, f"no norm of its own before the feed-forward of {type(layer).__name__}")
    try:
        src_mlp = feed_forward(layer)
    except MlpmemError:
        raise _refuse(model, init, f"{type(layer).__name__} has no feed-forward module") from None
    read = _mlp_state(src_mlp)
    activation = backbone_activation(model)
    if read is None or activation is None:
        raise _refuse(model, init, f"its feed-forward {type(src_mlp).__name__} is not one of the memory's blocks")
    mirror = Mirror(*norm, mlp=read[0], activation=activation, mlp_state=read[1])
    weight = next(iter(mirror.mlp_state.values()))
    ours = make_mlp(mirror.mlp, mirror.activation, weight.shape[1], mirror.intermediate_size).to(weight.device,
                                                                                                   weight.dtype)
    ours.load_state_dict(mirror.mlp_state)
    if not _same(ours, src_mlp, weight.shape[1], weight):
        raise _refuse(model, init, f"its feed-forward {type(src_mlp).__name__} computes another function")
    return mirror


def final_norm(model: nn.Module) -> nn.Module | None:
    """The backbone's norm before its head, found at the usual paths."""
    for path in FINAL_NORMS:
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
        if isinstance(obj, nn.Module):
            return obj
    return None


def read_final_norm(model: nn.Module, init: str = "backbone") -> tuple[str, float, dict[str, torch.Tensor]]:
    """The backbone's final norm as a memory norm (checked by a probe), or a one-line error."""
    norm = read_norm(final_norm(model))
    if norm is None:
        raise _refuse(model, init, "its final norm is not one the memory has")
    return norm


# ---------------------------------------------------------------------------------------------
# Sizing


def key_width(model: nn.Module) -> int:
    """The width d of the backbone's keys (its hidden size)."""
    return int(model.get_input_embeddings().weight.shape[1])


def size_for_backbone(config: MemoryConfig, model: nn.Module, tokenizer=None, key_layer: int | float = -1,
                      key_site: str = "ffn_input", head_vocab_size: int | None = None) -> MemoryConfig:
    """``config`` sized for ``model``'s keys at ``key_layer`` / ``key_site``: the key width, the vocabulary, the
    depth and widths resolved, and for ``init: backbone`` the mirrored settings (a family that
    cannot be mirrored is a one-line error). The fingerprint is recorded only with ``tokenizer``. Warns once
    when the memory's logits will not apply an output scaling of the backbone's."""
    if key_site not in SITES:
        raise ConfigError(f"key_site must be one of {SITES}, got {key_site!r}")
    d, layer = key_width(model), resolve_layer(model, key_layer)
    values = dict(input_size=d, vocab_size=int(model.get_output_embeddings().weight.shape[0]), key_layer=layer,
                  key_site=key_site, num_layers=config.depth, hidden_size=config.hidden_size or d,
                  intermediate_size=config.intermediate_size or ffn_width(model, d), head_vocab_size=head_vocab_size,
                  backbone=fingerprint(model, tokenizer) if tokenizer is not None else None)
    for name in ("input_size", "vocab_size"):
        if getattr(config, name) is not None and getattr(config, name) != values[name]:
            raise ConfigError(f"memory.{name}={getattr(config, name)} differs from the backbone's {values[name]}: "
                              "leave it unset")
    if config.init != "random" and values["hidden_size"] != d:
        raise ConfigError(f"memory.init: {config.init} needs memory.hidden_size unset (the key width {d})")
    if config.init == "backbone":
        mirror = read_block(model, init_start(model, layer))
        values.update(mlp=mirror.mlp, activation=mirror.activation, norm=mirror.norm, norm_eps=mirror.norm_eps,
                      intermediate_size=mirror.intermediate_size)
    sized = MemoryConfig.from_dict({**dataclasses.asdict(config), **values}, where="memory")
    warn_scaling(sized, model)
    return sized


def init_start(model: nn.Module, key_layer: int) -> int:
    """The first backbone layer ``init: backbone`` copies: the one just above the key layer (the last one at the
    top)."""
    return min(key_layer + 1, len(decoder_layers(model)) - 1)


def warn_scaling(config: MemoryConfig, model: nn.Module) -> None:
    """Warn, in one line, of a backbone output scaling the memory's logits do not apply, when its head is the
    backbone's (tied, or copied by ``init: backbone``)."""
    scaling = unhonoured_scaling(model)
    if scaling and (config.tie_head or config.init != "random"):
        warnings.warn(f"the memory's logits do not apply the {family(model)} backbone's {', '.join(scaling)}: its "
                      "head gives them unscaled (the backbone's own logits keep it)", stacklevel=3)
