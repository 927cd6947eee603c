"""A memory and its backbone: read the backbone's family and sizes, copy its weights in, share its head.

:func:`init_from_backbone` starts the memory blocks as copies of the feed-forward blocks of consecutive
backbone layers (the two block families mirror the two backbone families for this reason);
:func:`tie_to_backbone` makes the memory head the backbone's own output embedding (frozen, never saved).
The ``backbone_*`` readers give :meth:`MemoryConfig.from_backbone` what to size a memory by.

This module imports nothing else from :mod:`mlpmem.memory` at run time (``MLPMemory`` only for type
hints), so config.py, io.py and model.py can all import it without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from mlpmem.backbone import decoder_layers, feed_forward, resolve_layer
from mlpmem.errors import ConfigError

if TYPE_CHECKING:
    from mlpmem.memory.model import MLPMemory

# Hugging Face activation names -> ours (gelu_new and gelu_pytorch_tanh are the same tanh approximation)
HF_ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "relu": "relu",
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
}
FINAL_NORMS = ("model.norm", "transformer.ln_f", "gpt_neox.final_layer_norm", "model.decoder.final_layer_norm")


# ---------------------------------------------------------------------------------------------
# Reading the backbone


def backbone_family(model: nn.Module) -> str:
    """``llama`` if the backbone's MLP is gate/up/down, ``gpt2`` if it is c_fc/c_proj, else ConfigError."""
    mlp = feed_forward(decoder_layers(model)[0])
    if all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        return "llama"
    if all(hasattr(mlp, n) for n in ("c_fc", "c_proj")):
        return "gpt2"
    raise ConfigError(f"unsupported backbone MLP {type(mlp).__name__}: expected gate/up/down or c_fc/c_proj")


def backbone_intermediate_size(model: nn.Module, family: str) -> int:
    """The inner width of the backbone's feed-forward blocks."""
    mlp = feed_forward(decoder_layers(model)[0])
    return int(mlp.up_proj.out_features if family == "llama" else mlp.c_fc.nf)


def backbone_activation(model: nn.Module) -> str:
    """The backbone's MLP activation, in our names (ConfigError if we have no equivalent)."""
    config = model.config
    name = getattr(config, "hidden_act", None) or getattr(config, "activation_function", None)
    if name not in HF_ACTIVATIONS:
        raise ConfigError(f"unsupported backbone activation {name!r}; supported: {tuple(HF_ACTIVATIONS)}")
    return HF_ACTIVATIONS[name]


def backbone_norm_eps(model: nn.Module, family: str) -> float | None:
    """The backbone's norm epsilon, or None if its config does not record one."""
    config = model.config
    eps = getattr(config, "rms_norm_eps", None) if family == "llama" else getattr(config, "layer_norm_epsilon", None)
    return float(eps) if eps is not None else None


def _backbone_final_norm(model: nn.Module) -> nn.Module | None:
    for path in FINAL_NORMS:
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
        if isinstance(obj, nn.Module):
            return obj
    return None


# ---------------------------------------------------------------------------------------------
# Initialisation from the backbone's feed-forward blocks


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
    inter = backbone_intermediate_size(model, family)
    if (config.hidden_size, config.intermediate_size) != (hidden, inter):
        raise ConfigError(
            f"memory widths (hidden {config.hidden_size}, intermediate {config.intermediate_size}) differ from "
            f"the backbone's (hidden {hidden}, intermediate {inter})"
        )
    if family == "llama" and feed_forward(decoder_layers(model)[0]).up_proj.bias is not None:
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
        memory.head.weight.copy_(head_rows(memory, backbone_model.get_output_embeddings().weight))
    memory.config.init = "backbone"
    return indices


@torch.no_grad()
def init_identity(memory: MLPMemory, backbone_model: nn.Module) -> None:
    """Start the memory as the backbone's own read-out of its key: every block the identity, then the
    backbone's final norm and output embedding.

    Each block's output projection (``down_proj`` / ``c_proj``) is zeroed, so ``x + FFN(Norm(x)) = x`` at
    the start and the blocks learn a residual correction (the same start as zero-initialised residual
    branches or a LoRA ``B``). With keys from the residual stream after the last layer this memory is the
    backbone exactly before training: what it learns is how the corpus's neighbours differ from the
    backbone, not the whole read-out from scratch. Records ``init="identity"`` in the config.
    """
    if memory.config.hidden_size != memory.config.input_size:
        raise ConfigError("init=identity needs hidden_size == input_size (no input projection)")
    for block in memory.blocks:
        out = block.mlp.down_proj if hasattr(block.mlp, "down_proj") else block.mlp.c_proj
        out.weight.zero_()
        if out.bias is not None:
            out.bias.zero_()
    final = _backbone_final_norm(backbone_model)
    if final is not None:
        _copy_norm(memory.norm, final)
    if not memory.config.tie_head:
        memory.head.weight.copy_(head_rows(memory, backbone_model.get_output_embeddings().weight))
    memory.config.init = "identity"


def head_rows(memory: MLPMemory, weight: torch.Tensor) -> nn.Parameter:
    """The rows of a full-vocabulary head ``weight`` (V, H) that the memory's head holds: ``weight`` itself, or
    for a corpus head a copy of its ``vocab_ids`` rows (V', H), trainable only if ``weight`` is."""
    if memory.vocab_ids is None:
        return weight
    rows = weight.detach()[memory.vocab_ids.to(weight.device)].clone()  # (V', H)
    return nn.Parameter(rows, requires_grad=weight.requires_grad)


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


# ---------------------------------------------------------------------------------------------
# Tying the head


def tie_to_backbone(memory: MLPMemory, backbone_model: nn.Module) -> MLPMemory:
    """Share the backbone's output embedding as the memory head (frozen, not saved); sets ``tie_head``.

    A corpus head gets a frozen copy of the embedding's rows for its ``vocab_ids`` (gathered once).

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
    memory.head.weight = head_rows(memory, weight)
    memory.config.tie_head = True
    memory._tied = True
    return memory
