"""A memory and its backbone: copy the backbone's blocks in, start as its read-out, share its head.

:func:`init_from_backbone` starts the memory blocks as copies of the norm and feed-forward of consecutive
backbone layers, under the backbone's final norm (both read and checked by :mod:`mlpmem.memory.sizing`, which sizes
the memory for them); :func:`tie_to_backbone` makes the memory head the backbone's own output embedding (frozen,
never saved).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from mlpmem.backbone import decoder_layers, resolve_layer
from mlpmem.errors import ConfigError
from mlpmem.memory.sizing import family, read_block, read_final_norm

if TYPE_CHECKING:
    from mlpmem.memory.model import MLPMemory


# ---------------------------------------------------------------------------------------------
# Initialisation from the backbone's blocks


def _init_layer_indices(num_backbone: int, num_memory: int, start: int) -> list[int]:
    if num_memory <= num_backbone:
        start = min(start, num_backbone - num_memory)  # shift the window left so that it fits
        return list(range(start, start + num_memory))
    return [(start + i) % num_backbone for i in range(num_memory)]  # deeper than the backbone: cycle


def _check_mirror(memory: MLPMemory, model: nn.Module, index: int, init: str):
    config, mirror = memory.config, read_block(model, index, init)
    ours = (config.mlp, config.activation, config.norm)
    theirs = (mirror.mlp, mirror.activation, mirror.norm)
    if ours != theirs:
        raise ConfigError(f"cannot init a {'/'.join(ours)} memory from a {family(model)} backbone's "
                          f"{'/'.join(theirs)} blocks: size it with init: backbone")
    hidden = int(mirror.norm_state["weight"].shape[0])
    if (config.width, config.intermediate_size) != (hidden, mirror.intermediate_size):
        raise ConfigError(
            f"memory widths (hidden {config.width}, intermediate {config.intermediate_size}) differ from "
            f"the backbone's (hidden {hidden}, intermediate {mirror.intermediate_size})"
        )
    return mirror


@torch.no_grad()
def init_from_backbone(memory: MLPMemory, backbone_model: nn.Module, start_layer: int | float) -> list[int]:
    """Copy the norm and feed-forward of consecutive backbone layers into the memory blocks.

    Memory block i gets the pre-feed-forward norm and the feed-forward weights of backbone layer ``start + i``.
    ``start_layer`` is resolved like a key layer (negative ints count from the end, floats are depth fractions).
    If the window ``[start, start + L)`` runs past the last backbone layer it is shifted left to end at the last
    layer; if the memory has more blocks than the backbone has layers, the layers are reused cyclically from
    ``start``. Also copies the backbone's final norm, and its output embedding into an untied head (as a
    trainable copy). Returns the backbone layer indices used and records ``init="backbone"`` in the config.
    """
    layers = decoder_layers(backbone_model)
    indices = _init_layer_indices(len(layers), memory.config.depth, resolve_layer(backbone_model, start_layer))
    for block, index in zip(memory.blocks, indices):
        mirror = _check_mirror(memory, backbone_model, index, "backbone")
        block.norm.load_state_dict(mirror.norm_state)
        block.mlp.load_state_dict(mirror.mlp_state, strict=False)  # the activation has no state
    _copy_read_out(memory, backbone_model, "backbone")
    memory.config.init = "backbone"
    return indices


def _copy_read_out(memory: MLPMemory, model: nn.Module, init: str) -> None:
    """The backbone's final norm into the memory's, and its output embedding into an untied head."""
    kind, eps, state = read_final_norm(model, init)
    if (kind, eps) != (memory.config.norm, memory.config.norm_eps):
        raise ConfigError(f"the memory's final norm ({memory.config.norm}, eps {memory.config.norm_eps}) is not the "
                          f"{family(model)} backbone's ({kind}, eps {eps}): size it with init: {init}")
    memory.norm.load_state_dict(state)
    if not memory.config.tie_head:
        memory.head.weight.copy_(head_rows(memory, model.get_output_embeddings().weight))


def head_rows(memory: MLPMemory, weight: torch.Tensor) -> nn.Parameter:
    """The rows of a full-vocabulary head ``weight`` (V, H) that the memory's head holds: ``weight`` itself, or
    for a corpus head a copy of its ``vocab_ids`` rows (V', H), trainable only if ``weight`` is."""
    if memory.vocab_ids is None:
        return weight
    rows = weight.detach()[memory.vocab_ids.to(weight.device)].clone()  # (V', H)
    return nn.Parameter(rows, requires_grad=weight.requires_grad)


# ---------------------------------------------------------------------------------------------
# Tying the head


def tie_to_backbone(memory: MLPMemory, backbone_model: nn.Module) -> MLPMemory:
    """Share the backbone's output embedding as the memory head (frozen, not saved); sets ``tie_head``.

    A corpus head gets a frozen copy of the embedding's rows for its ``vocab_ids`` (gathered once).

    The shared Parameter gets ``requires_grad=False``, which also freezes it in the backbone (the
    backbone of MLP Memory is frozen anyway).
    """
    weight = backbone_model.get_output_embeddings().weight
    expected = (memory.config.vocab_size, memory.config.width)
    if tuple(weight.shape) != expected:
        raise ConfigError(
            f"cannot tie the memory head {expected} to the backbone output embedding {tuple(weight.shape)}"
        )
    weight.requires_grad_(False)
    memory.head.weight = head_rows(memory, weight)
    memory.config.tie_head = True
    memory._tied = True
    return memory
