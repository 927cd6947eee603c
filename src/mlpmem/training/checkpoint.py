"""The trainer's state and its checkpoints: safetensors and JSON only (nothing is unpickled), swapped in
atomically, checksummed.

:class:`TrainState` is everything a training carries from step to step besides the weights and the optimizer
moments: its progress, its history, the best-evaluation counters, and what it was built from (its recipe, as
:mod:`mlpmem.freshness` settings). The learning rate schedule and every random draw (batch order,
dropout) are functions of ``(seed, step)``, so the step restores them. A checkpoint folder holds the memory
(``save_pretrained``), the optimizer moments and ``trainer_state.json``, the state saved whole with the sha256
of both files, checked when the checkpoint is opened; a state file of another format is refused in one line.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mlpmem import freshness
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory.model import MLPMemory
from mlpmem.utils.io import replace_dir
from mlpmem.utils.shards import read_json, sha256_file, write_json, writing

CHECKPOINT_FILES = ("memory/model.safetensors", "optimizer.safetensors")
STATE_FILE = "trainer_state.json"
FORMAT = "mlpmem.train_state/1"


@dataclass
class TrainState:
    """A training's state, saved whole in every checkpoint and, at the end, as ``train_state.json``."""

    built_from: dict
    """The recipe it trains under (:func:`mlpmem.training.config.recipe`): it resumes only under the same."""
    step: int = 0
    train_seconds: float = 0.0
    history: list[dict] = field(default_factory=list)
    """One entry per validation evaluation (epoch, step, tokens seen, loss, the metrics)."""
    best_step: int | None = None
    best_joint_ppl: float | None = None
    evals_since_best: int = 0
    stopped: bool = False
    """Set once ``train.patience`` evaluations in a row did not improve."""
    # set when the training ends (``train_state.json``): its speed, its processes and sharding, how it ended
    tokens_per_s: float | None = None
    processes: int | None = None
    sharding: str | None = None
    stopped_early: bool = False
    restored_best: bool = False
    format: str = FORMAT

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, what: str) -> TrainState:
        """The state saved as ``data``, every field of it; another format is refused in one line."""
        if data.get("format") != FORMAT or set(data) != {f.name for f in dataclasses.fields(cls)}:
            raise CorruptArtifact(f"{what} is not a {FORMAT} trainer state: train it again in a new folder "
                                  "(or --rebuild)")
        return cls(**data)

    def check_built_from(self, wanted: dict, what: str) -> None:
        """Refuse, in one line naming the first changed setting, a state trained under another recipe."""
        freshness.check(self.built_from, wanted, what, "use another folder, or retrain it (--rebuild)",
                        built="was trained", error=ConfigError)


def read_state(path: Path, what: str = "trainer state") -> TrainState:
    """The :class:`TrainState` saved at ``path`` (a checkpoint's or a finished training's)."""
    data = read_json(path, what)
    data.pop("files", None)
    return TrainState.from_dict(data, f"{what} {path}")


def flat_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer state as checkpoint tensors ``{i.name}``, ``i`` the index of the parameter in the groups."""
    return flatten_state([group["params"] for group in optimizer.param_groups], optimizer.state)


def flatten_state(groups: list[list], state: dict) -> dict[str, torch.Tensor]:
    """Per-parameter optimizer ``state`` (keyed by the entries of ``groups``) as ``{i.name}`` tensors."""
    keys = [key for group in groups for key in group]
    return {f"{i}.{name}": torch.as_tensor(value).detach().clone().contiguous()
            for i, key in enumerate(keys) for name, value in state.get(key, {}).items()}


def save_checkpoint(folder: Path, memory: torch.nn.Module, moments: dict[str, torch.Tensor], state: dict) -> None:
    """Write the checkpoint (the model, the optimizer ``moments`` of :func:`flat_moments`, the trainer state as
    JSON, e.g. :meth:`TrainState.as_dict`) to ``<folder>.tmp``, then swap it in (a full disk leaves the previous
    one intact)."""
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
    write_json(tmp / STATE_FILE, dict(state, files=files))


def recover_checkpoint(folder: Path) -> None:
    """A kill between the two renames of :func:`save_checkpoint` leaves only ``<folder>.old``: put it back."""
    old = folder.with_name(folder.name + ".old")
    if not folder.exists() and (old / STATE_FILE).exists():
        old.rename(folder)


def verify_checkpoint(folder: Path) -> TrainState:
    """The trainer state of a checkpoint whose files match the sha256 it records."""
    files = read_json(folder / STATE_FILE, "trainer state").get("files")
    if not isinstance(files, dict) or set(files) != set(CHECKPOINT_FILES):
        raise CorruptArtifact(f"checkpoint {folder} records no checksums of its files: train it again in a new "
                              "folder (or --rebuild)")
    for name, digest in files.items():
        if not (folder / name).is_file() or sha256_file(folder / name) != digest:
            raise CorruptArtifact(f"checkpoint {folder}: {name} fails its checksum (truncated or corrupted)")
    return read_state(folder / STATE_FILE, "checkpoint")


def load_checkpoint(folder: Path, memory: MLPMemory, optimizer: torch.optim.Optimizer) -> TrainState:
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
