"""Memory checkpoints: ``config.json`` + ``model.safetensors``, written atomically and read with checks.

A save goes to a sibling temporary folder which then replaces the target folder whole; a load checks the
recorded backbone fingerprint, the tensor names and shapes, and turns missing or unreadable files into a
CorruptArtifact naming the file. A tied head is the backbone's tensor: it is neither saved nor loaded.

Import direction: ``model.py -> io.py -> config.py, init.py``. ``MLPMemory`` keeps the Hugging Face style
``save_pretrained`` / ``from_pretrained`` methods, which delegate here passing the instance or the class;
this module never imports model.py, so there is no cycle.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TypeVar

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from mlpmem.backbone import check_fingerprint, fingerprint
from mlpmem.compute import model_device
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory.config import MemoryConfig
from mlpmem.memory.init import tie_to_backbone
from mlpmem.utils.checksums import verify_weights
from mlpmem.utils.io import fsync_file, replace_dir
from mlpmem.utils.shards import writing

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

Memory = TypeVar("Memory", bound=nn.Module)


def save_memory(memory: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``memory`` (an MLPMemory) to ``directory`` atomically; see ``MLPMemory.save_pretrained``."""
    target = Path(directory)
    _check_replaceable(target)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with writing(tmp, target):  # a full disk: a one-line DiskFull, the previous memory intact
            save_file(state_to_save(memory), str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
            (tmp / CONFIG_NAME).write_text(json.dumps(memory.config.to_dict(), indent=2, sort_keys=True) + "\n")
            for name in (WEIGHTS_NAME, CONFIG_NAME):
                fsync_file(tmp / name)
        replace_dir(tmp, target, old=target.with_name(f".{target.name}.old{os.getpid()}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def state_to_save(memory: nn.Module) -> dict[str, torch.Tensor]:
    """The memory's tensors as stored: on the CPU, contiguous, without a tied head."""
    state = memory.state_dict()
    if memory.config.tie_head:
        state.pop("head.weight")
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def load_memory(
    cls: type[Memory],
    directory: str | os.PathLike,
    backbone_model: nn.Module | None = None,
    backbone_tokenizer=None,
) -> Memory:
    """A ``cls`` (MLPMemory) loaded from ``directory``; see ``MLPMemory.from_pretrained``."""
    directory = Path(directory)
    config = _read_config(directory / CONFIG_NAME)
    if config.backbone is not None and backbone_model is not None:
        verify_backbone(config.backbone, backbone_model, backbone_tokenizer, f"memory {directory}")
    if config.tie_head and backbone_model is None:
        raise ConfigError(f"memory {directory} has a tied head: pass backbone_model to load it")
    memory = cls(config)
    state = _read_weights(directory / WEIGHTS_NAME)
    verify_weights(directory / WEIGHTS_NAME, state)
    expected = set(state_to_save(memory))
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise CorruptArtifact(f"{directory / WEIGHTS_NAME}: missing tensors {missing}, unexpected {extra}")
    try:
        memory.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise CorruptArtifact(f"{directory / WEIGHTS_NAME}: {_first_line(exc)}") from None
    if config.tie_head:
        tie_to_backbone(memory, backbone_model)
    if backbone_model is not None:  # beside its backbone (a tied head is already there)
        memory.to(model_device(backbone_model))
    return memory


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else type(exc).__name__)


def _check_replaceable(target: Path) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError(f"cannot save a memory to {target}: it exists and is not a folder")
    foreign = sorted(p.name for p in target.iterdir() if p.name not in (CONFIG_NAME, WEIGHTS_NAME))
    if foreign:
        raise ConfigError(f"refusing to replace {target}: it holds other files ({', '.join(foreign[:3])})")


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
