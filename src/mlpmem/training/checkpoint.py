"""Training checkpoints: safetensors and JSON only (nothing is unpickled), swapped in atomically, checksummed.

A checkpoint folder holds the memory (``save_pretrained``), the optimizer moments and a JSON trainer state
recording the sha256 of both files, checked when the checkpoint is opened.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mlpmem.errors import CorruptArtifact
from mlpmem.memory.model import MLPMemory
from mlpmem.utils.io import replace_dir
from mlpmem.utils.shards import read_json, sha256_file, write_json, writing

CHECKPOINT_FILES = ("memory/model.safetensors", "optimizer.safetensors")


def flat_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer state as checkpoint tensors ``{i.name}``, ``i`` the index of the parameter in the groups."""
    return flatten_state([group["params"] for group in optimizer.param_groups], optimizer.state)


def flatten_state(groups: list[list], state: dict) -> dict[str, torch.Tensor]:
    """Per-parameter optimizer ``state`` (keyed by the entries of ``groups``) as ``{i.name}`` tensors."""
    keys = [key for group in groups for key in group]
    return {f"{i}.{name}": torch.as_tensor(value).detach().clone().contiguous()
            for i, key in enumerate(keys) for name, value in state.get(key, {}).items()}


def save_checkpoint(folder: Path, memory: torch.nn.Module, moments: dict[str, torch.Tensor], state: dict) -> None:
    """Write the checkpoint (the model, the optimizer ``moments`` of :func:`flat_moments`, the trainer state) to
    ``<folder>.tmp``, then swap it in (a full disk leaves the previous one intact)."""
    tmp = folder.with_name(folder.name + ".tmp")
    with writing(tmp):
        _write_checkpoint(tmp, memory, moments, state)
    replace_dir(tmp, folder, old=folder.with_name(folder.name + ".old"))  # recover_checkpoint knows this name


def _write_checkpoint(tmp: Path, memory: torch.nn.Module, moments: dict[str, torch.Tensor], state: dict) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    memory.save_pretrained(tmp / "memory")
    save_file(moments, str(tmp / "optimizer.safetensors"))
    files = {name: sha256_file(tmp / name) for name in CHECKPOINT_FILES}
    write_json(tmp / "trainer_state.json", dict(state, files=files))


def recover_checkpoint(folder: Path) -> None:
    """A kill between the two renames of :func:`save_checkpoint` leaves only ``<folder>.old``: put it back."""
    old = folder.with_name(folder.name + ".old")
    if not folder.exists() and (old / "trainer_state.json").exists():
        old.rename(folder)


def verify_checkpoint(folder: Path) -> dict:
    """The trainer state of a checkpoint whose files match the sha256 it records (older checkpoints, without
    checksums, are read as before)."""
    state = read_json(folder / "trainer_state.json", "trainer state")
    for name, digest in state.pop("files", {}).items():
        if not (folder / name).is_file() or sha256_file(folder / name) != digest:
            raise CorruptArtifact(f"checkpoint {folder}: {name} fails its checksum (truncated or corrupted)")
    return state


def load_checkpoint(folder: Path, memory: MLPMemory, optimizer: torch.optim.Optimizer) -> dict:
    """Restore the memory weights and optimizer moments saved by :func:`save_checkpoint`; return its state."""
    state = verify_checkpoint(folder)
    try:
        weights = load_file(str(folder / "memory" / "model.safetensors"))
        moments = load_file(str(folder / "optimizer.safetensors"))
    except Exception as exc:  # a truncated or foreign file: name it rather than train from a wrong state
        raise CorruptArtifact(f"checkpoint {folder} is unreadable: {str(exc).splitlines()[0]}") from None
    expected = {k for k in memory.state_dict() if not (memory.config.tie_head and k == "head.weight")}
    if set(weights) != expected:
        raise CorruptArtifact(f"checkpoint {folder} does not hold this memory's tensors")
    memory.load_state_dict(weights, strict=False)  # a tied head is the backbone's, not in the checkpoint
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for key, value in moments.items():
        index, name = key.split(".", 1)
        optimizer.state[params[int(index)]][name] = value
    return state
