"""The files of a saved memory-augmented model folder (see :mod:`mlpmem.inference.hf_model`): how the backbone is
named, how the config, backbone and memory are read back, and what a save may replace: only a folder whose every
file the record of an earlier save (``mlpmem-files.json``) lists."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from mlpmem.backbone import load_backbone
from mlpmem.compute import model_device
from mlpmem.errors import ConfigError, CorruptArtifact, MlpmemError
from mlpmem.inference.hf_config import MODEL_TYPE, MemoryAugmentedConfig
from mlpmem.layout import RunLayout
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import CONFIG_NAME
from mlpmem.utils.checksums import require_record
from mlpmem.utils.shards import read_json, write_json

MEMORY_DIR = "memory"
GATE_DIR = "gate"
REMOTE_CODE = "modeling_mlpmem.py"
"""The folder's remote-code file: what ``auto_map`` names, so that stock transformers tools (lm-eval's ``hf``
type, ``AutoModelForCausalLM``) load the folder with ``trust_remote_code=True`` without importing mlpmem first."""
AUTO_MAP = {"AutoConfig": "modeling_mlpmem.MemoryAugmentedConfig",
            "AutoModelForCausalLM": "modeling_mlpmem.MemoryAugmentedForCausalLM"}
REMOTE_CODE_TEXT = '''"""An mlpmem export (an MLP Memory mixed into a frozen causal LM) for transformers' remote code:
``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)``, e.g. lm-eval's
``--model hf --model_args pretrained=FOLDER,trust_remote_code=True``.

The classes are the installed mlpmem package's own (``pip install mlpmem``; written by mlpmem {version}).
"""

from mlpmem.inference.hf_config import MemoryAugmentedConfig
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM

__all__ = ["MemoryAugmentedConfig", "MemoryAugmentedForCausalLM"]
'''
FILES = "mlpmem-files.json"
"""The record of the files a save wrote (:func:`record_files`): the files a later save may replace."""
FILES_FORMAT = "mlpmem.saved-files/1"


def backbone_reference(backbone, name: str | None = None) -> str | None:
    """How a saved folder names ``backbone``: ``name``, else the name ``load_backbone`` gave it, else its
    ``name_or_path``; a local folder as an absolute path (the saved folder loads from any working directory)."""
    ref = name or getattr(backbone, "mlpmem_name", None) or getattr(backbone.config, "name_or_path", None) or None
    if ref is not None and Path(ref).expanduser().is_dir():
        return str(Path(ref).expanduser().resolve())
    return ref


def torch_dtype(dtype) -> torch.dtype:
    """The backbone's dtype from a ``from_pretrained`` argument (None / "auto": fp32, the mlpmem default)."""
    if dtype is None or dtype == "auto":
        return torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"dtype must be a torch dtype or its name, got {dtype!r}")
    return dtype


def read_config(folder: Path) -> MemoryAugmentedConfig:
    """The ``config.json`` of a saved folder, refused in one line if missing, unreadable or not an mlpmem one."""
    path = folder / "config.json"
    if not path.is_file():
        raise CorruptArtifact(f"{folder} is not a saved memory-augmented model: {path} is missing")
    try:
        raw = MemoryAugmentedConfig.get_config_dict(str(folder))[0]
        if raw.get("model_type") != MODEL_TYPE:
            raise CorruptArtifact(f"{path} is a {raw.get('model_type')!r} model, not a memory-augmented one "
                                  f"(model_type {MODEL_TYPE!r})")
        return MemoryAugmentedConfig.from_dict(raw)
    except (OSError, ValueError) as exc:  # JSON errors and ConfigError are ValueErrors
        if isinstance(exc, MlpmemError):
            raise
        raise CorruptArtifact(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None


def load_named_backbone(name: str, dtype: torch.dtype):
    """``load_backbone(name)``, with the hub client's own errors for a name that is no folder made one line."""
    try:
        return load_backbone(name, dtype=dtype)
    except ValueError as exc:
        if isinstance(exc, MlpmemError):
            raise
        raise MlpmemError(f"cannot load backbone {name!r}: {str(exc).splitlines()[0]}") from None


def load_folder_memory(folder: Path, model, tokenizer) -> MLPMemory:
    """The folder's memory: present, matching its recorded checksums, built on ``model``; on its device."""
    memory_dir = folder / MEMORY_DIR
    if not (memory_dir / CONFIG_NAME).is_file():
        raise CorruptArtifact(f"{folder} holds no memory: {memory_dir / CONFIG_NAME} is missing")
    require_record(memory_dir, f"memory {memory_dir}", "if these weights are the ones saved, record them with "
                   f"`mlpmem record-checksums {folder}`; else save the model again")
    memory = MLPMemory.from_pretrained(memory_dir, model, tokenizer)
    return memory.to(model_device(model)).eval()


def single_device(device_map):
    """The one device a ``device_map`` names (None: leave the model where it loaded)."""
    if device_map is None or device_map == "auto":
        return None
    if isinstance(device_map, dict):
        devices = set(device_map.values())
        if len(devices) != 1:
            raise ConfigError(f"a memory-augmented model runs on one device, got device_map {device_map}")
        device_map = devices.pop()
    return torch.device(device_map if not isinstance(device_map, int) else f"cuda:{device_map}")


def write_remote_code(folder: Path, config: MemoryAugmentedConfig) -> None:
    """Write :data:`REMOTE_CODE` into ``folder`` and point ``config``'s ``auto_map`` at it (before the config is
    saved): transformers' custom-model convention, which loads the folder with ``trust_remote_code=True`` in a
    process that never imported mlpmem (the file imports the installed package's classes)."""
    from mlpmem import __version__

    (folder / REMOTE_CODE).write_text(REMOTE_CODE_TEXT.format(version=__version__), encoding="utf-8")
    config.auto_map = dict(AUTO_MAP)
    config._auto_class = None  # a remote-code load marks the class: transformers would copy hf_config.py here


def own_files(folder: Path) -> list[str]:
    """Every file under ``folder``, relative to it (what a save wrote, recorded in :data:`FILES`)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def record_files(folder: Path) -> None:
    """Record the files a save wrote in ``folder`` (written last: a folder without it is no finished save)."""
    write_json(folder / FILES, {"format": FILES_FORMAT, "files": own_files(folder)})


def foreign_files(folder: Path) -> list[str]:
    """The files under ``folder`` that no save of a memory-augmented model wrote there: every one when it has no
    record of its own files (:data:`FILES`), else those its record does not list."""
    path = folder / FILES
    record = read_json(path, "saved model's files") if path.is_file() else {}
    listed = set(record.get("files", [])) if record.get("format") == FILES_FORMAT else set()
    return [name for name in own_files(folder) if name != FILES and name not in listed]


def check_replaceable(target: Path) -> None:
    """Refuse to replace anything but an earlier save (by the record of its own files) or an empty folder: a save
    replaces the folder whole, and a folder holding any file it did not write is not its to delete."""
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError(f"cannot save to {target}: it exists and is not a folder")
    foreign = foreign_files(target)
    if foreign:
        what = "a run folder" if RunLayout(target).config.is_file() else "not a saved memory-augmented model"
        listed = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ConfigError(f"refusing to replace {target}: it is {what} and holds files a save did not write "
                          f"({listed}): save to a new or empty folder")


def check_save_kwargs(kwargs: dict) -> None:
    """Refuse a keyword of transformers' ``save_pretrained`` that a memory-augmented save would ignore: one it does
    not name, or one given another value than its default (``push_to_hub=True``: the save is one local folder)."""
    from transformers import PreTrainedModel

    params = inspect.signature(PreTrainedModel.save_pretrained).parameters
    for key, value in kwargs.items():
        if key not in params or key in ("self", "save_directory", "kwargs"):
            raise ConfigError(f"save_pretrained() takes no {key}= argument")
        default = params[key].default
        if not (value is default or (type(value) is type(default) and value == default)):
            raise ConfigError(f"save_pretrained({key}={value!r}) is not supported: a memory-augmented model saves one "
                              f"local folder, with {key}={default!r}")
