"""Sharded training (PyTorch FSDP2): the memory, its gradients and AdamW moments split across processes.

The loop trains a sharded copy; the plain memory gets the full weights (and the checkpoint the full moments)
at every checkpoint and at the end, so checkpoints are the same files as under DDP.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from mlpmem.memory.model import MLPMemory
from mlpmem.training.checkpoint import flatten_state
from mlpmem.training.config import TrainConfig
from mlpmem.training.optim import adamw


def return_large_frees_to_os(threshold: int = 1 << 20) -> None:
    """Serve allocations of ``threshold`` bytes or more with their own memory maps (glibc ``M_MMAP_THRESHOLD``),
    so that freeing them returns the memory to the OS. On CPU, FSDP gathers and frees every block's full
    parameters at each step; glibc's heap otherwise keeps the freed buffers and the resident set grows past
    DDP's (measured by ``python -m studies bench scale``). Same as ``MALLOC_MMAP_THRESHOLD_=1048576``; no-op off
    glibc."""
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            pass


def shard_memory(memory: MLPMemory, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                 device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A copy of ``memory`` sharded with FSDP2 across all processes, and its AdamW holding ``optimizer``'s moments.

    Each block is one FSDP unit (gathered in turn in forward and backward); the root holds the input projection,
    the final norm and an untied head. Frozen parameters (a tied head, which is the backbone's embedding) are
    neither copied nor sharded. ``memory`` stays plain: it gets the full weights at checkpoints and at the end.
    """
    frozen = {p for p in memory.parameters() if not p.requires_grad}
    model = copy.deepcopy(memory, {id(p): p for p in frozen})
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, ignored_params=frozen)
    fully_shard(model, mesh=mesh, ignored_params=frozen)
    sharded = adamw(model, cfg)
    if optimizer.state:  # resumed: every process read the checkpoint's full moments and keeps its shards of them
        full = get_optimizer_state_dict(memory, optimizer)
        set_optimizer_state_dict(model, sharded, full, options=StateDictOptions(full_state_dict=True))
    return model, sharded


def gather_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                      memory: MLPMemory) -> dict[str, torch.Tensor]:
    """Collective: process 0's plain ``memory`` gets the full weights of the sharded ``model``; returns the full
    optimizer moments in the checkpoint format of :func:`~mlpmem.training.checkpoint.flat_moments` there
    (``{}`` on the other processes)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    weights = get_model_state_dict(model, options=options)  # gathered one tensor at a time, kept on process 0
    full = get_optimizer_state_dict(model, optimizer, options=options)
    if torch.distributed.get_rank() != 0:
        return {}
    memory.load_state_dict(weights, strict=False)  # a frozen (tied) head is not gathered: it is the backbone's
    return flatten_state([group["params"] for group in full["param_groups"]], full["state"])


def unshard_into(model: torch.nn.Module, memory: MLPMemory) -> None:
    """Collective: every process's plain ``memory`` gets the full weights of the sharded ``model``."""
    options = StateDictOptions(full_state_dict=True, ignore_frozen_params=True)
    memory.load_state_dict(get_model_state_dict(model, options=options), strict=False)
