"""The memory-augmented LM as a transformers model: ``MemoryAugmentedForCausalLM``, saved as one folder.

It wraps a :class:`~mlpmem.inference.augmented_lm.MemoryAugmentedLM` (the hooks that mix the memory into the
backbone's own forward) and delegates to it: ``forward`` returns the mixed log-probabilities as ``logits``
and ``generate`` is the backbone's stock ``generate`` run under the hooks (greedy, sampling, beam search,
batches with left padding, KV cache), so the mixing exists once. Being a ``PreTrainedModel`` it has what
transformers' tools expect of a model (``device``, ``config``, ``generation_config``): ``pipeline(
"text-generation", model=...)`` and lm-evaluation-harness's ``hf`` model type take it as it is.

A saved folder::

    folder/
      config.json              MemoryAugmentedConfig: backbone reference, fingerprint, λ, gate, key layer/site
      tokenizer files          the backbone's tokenizer (AutoTokenizer.from_pretrained(folder) works)
      memory/                  the memory (config.json + model.safetensors, mlpmem.memory.io)
      memory.sha256.json       the checksums of memory/'s files, checked when it loads
      gate/                    the learned gate, if any (gate.json + gate.safetensors, bound to the memory)
      backbone/                the backbone itself, only when saved with ``copy_backbone=True``

Importing this module registers the ``mlpmem`` model type with ``AutoConfig`` and ``AutoModelForCausalLM``
(as any package registers its own model type), so ``AutoModelForCausalLM.from_pretrained(folder)`` works
once ``import mlpmem.inference.hf_model`` (or ``import mlpmem.evaluation.harness``) has run; there is no
remote code.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from mlpmem.backbone import check_fingerprint, fingerprint, load_backbone
from mlpmem.compute import model_device
from mlpmem.errors import ConfigError, CorruptArtifact, MlpmemError
from mlpmem.inference.augmented_lm import MemoryAugmentedLM
from mlpmem.inference.gate_io import load_gate, save_gate
from mlpmem.inference.hf_config import BACKBONE_COPY, MODEL_TYPE, MemoryAugmentedConfig
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import CONFIG_NAME, WEIGHTS_NAME, save_memory
from mlpmem.utils.checksums import record_folder, verify_folder
from mlpmem.utils.io import replace_dir

MEMORY_DIR = "memory"
GATE_DIR = "gate"


def backbone_reference(backbone, name: str | None = None) -> str | None:
    """How a saved folder names ``backbone``: ``name``, else the name ``load_backbone`` gave it, else its
    ``name_or_path``; a local folder as an absolute path (the saved folder loads from any working directory)."""
    ref = name or getattr(backbone, "mlpmem_name", None) or getattr(backbone.config, "name_or_path", None) or None
    if ref is not None and Path(ref).expanduser().is_dir():
        return str(Path(ref).expanduser().resolve())
    return ref


def _torch_dtype(dtype) -> torch.dtype:
    """The backbone's dtype from a ``from_pretrained`` argument (None / "auto": fp32, the mlpmem default)."""
    if dtype is None or dtype == "auto":
        return torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"dtype must be a torch dtype or its name, got {dtype!r}")
    return dtype


class MemoryAugmentedForCausalLM(PreTrainedModel, GenerationMixin):
    """A frozen causal LM mixed with an MLP Memory (fixed λ or a learned gate), as a transformers model.

    Build it with :meth:`from_augmented` (a :class:`MemoryAugmentedLM` and its tokenizer),
    :meth:`from_pretrained` (a saved folder) or :func:`mlpmem.pipeline.hf_export.augmented_from_run` (a
    finished run folder). The parameters are the backbone's and the memory's (and the gate's), under
    ``mixer.``; ``forward`` and ``generate`` are :class:`MemoryAugmentedLM`'s.
    """

    config_class = MemoryAugmentedConfig
    base_model_prefix = "mixer"
    main_input_name = "input_ids"

    def __init__(self, config: MemoryAugmentedConfig, mixer: MemoryAugmentedLM | None = None, tokenizer=None):
        if mixer is None:
            raise ConfigError("MemoryAugmentedForCausalLM needs a trained memory: use from_pretrained(folder), "
                              "from_augmented(...) or mlpmem.pipeline.hf_export.augmented_from_run(run_dir)")
        super().__init__(config)
        self.mixer = mixer
        self.tokenizer = tokenizer
        self.generation_config = mixer.backbone.generation_config  # one object: what generate really uses
        self.post_init()

    def init_weights(self):
        """Nothing to initialise: the backbone and the memory come trained (and tied) from their own loading."""

    def tie_weights(self, *args, **kwargs):
        """Nothing to tie: the backbone tied its weights when it loaded, and a tied memory head IS its embedding."""

    # -- the wrapped pieces

    @property
    def backbone(self):
        return self.mixer.backbone

    @property
    def memory(self) -> MLPMemory:
        return self.mixer.memory

    @property
    def gate(self):
        return self.mixer.gate

    @property
    def lam(self) -> float:
        return self.mixer.lam

    def set_lambda(self, lam: float) -> None:
        """Set the fixed λ of p_mem (also in the config, so a save keeps it)."""
        self.mixer.set_lambda(lam)
        self.config.lam = self.mixer.lam

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def get_output_embeddings(self):
        return self.backbone.get_output_embeddings()

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        """The backbone's forward with log((1 - λ) p_LM + λ p_mem) as ``logits`` (and the loss on them)."""
        return self.mixer(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    @torch.no_grad()
    def generate(self, inputs=None, **kwargs):
        """The backbone's stock ``generate`` on the mixed distribution (every decoding strategy, KV cache)."""
        if inputs is not None:
            kwargs["inputs"] = inputs
        return self.mixer.generate(**kwargs)

    # -- building

    @classmethod
    def from_augmented(cls, mixed: MemoryAugmentedLM, tokenizer, backbone: str | None = None
                       ) -> MemoryAugmentedForCausalLM:
        """Wrap ``mixed`` (its backbone named ``backbone``, default: as :func:`backbone_reference` finds it)."""
        if tokenizer is None:
            raise ConfigError("MemoryAugmentedForCausalLM needs the backbone's tokenizer (fingerprint and save)")
        model = mixed.backbone
        config = MemoryAugmentedConfig(
            backbone=backbone_reference(model, backbone), backbone_fingerprint=fingerprint(model, tokenizer),
            lam=mixed.lam, gate=mixed.gate is not None, key_layer=mixed.key_layer, key_site=mixed.key_site,
            max_position_embeddings=_context_length(model.config),
            vocab_size=int(model.get_output_embeddings().weight.shape[0]),
        )
        return cls(config, mixed, tokenizer).eval()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, dtype=None,
                        device_map=None, **kwargs) -> MemoryAugmentedForCausalLM:
        """Load a folder written by :meth:`save_pretrained`: the backbone (by reference or its copy), checked
        against the recorded fingerprint, the memory (checksums, fingerprint, layer and site) and the gate.

        ``dtype`` is the backbone's (default fp32); ``device_map`` may name one device (``"cuda:0"`` or
        ``{"": "cuda:0"}``). Hub arguments that ``AutoModelForCausalLM`` passes along are ignored.
        """
        folder = Path(pretrained_model_name_or_path)
        config = config if isinstance(config, MemoryAugmentedConfig) else read_config(folder)
        name = str(folder / BACKBONE_COPY) if config.backbone_copied else config.backbone
        if name is None:
            raise CorruptArtifact(f"{folder / 'config.json'} names no backbone")
        model, tokenizer = _load_backbone(name, _torch_dtype(dtype))
        if config.backbone_fingerprint is not None:
            check_fingerprint(config.backbone_fingerprint, fingerprint(model, tokenizer), f"the model in {folder}")
        memory = _load_memory(folder, model, tokenizer)
        gate = load_gate(folder / GATE_DIR, memory) if config.gate else None
        mixed = MemoryAugmentedLM(model, memory, lam=config.lam, key_layer=config.key_layer,
                                  key_site=config.key_site, tokenizer=tokenizer, gate=gate)
        wrapped = cls(config, mixed, tokenizer).eval()
        device = _single_device(device_map)
        return wrapped if device is None else wrapped.to(device)

    # -- saving

    def save_pretrained(self, save_directory, copy_backbone: bool = False, **kwargs) -> Path:
        """Write the folder (see the module docstring) atomically: ``save_directory`` is replaced whole.

        The backbone is saved by reference unless ``copy_backbone`` (then into ``backbone/``); other keyword
        arguments of transformers' ``save_pretrained`` are accepted and ignored.
        """
        target = Path(save_directory)
        _check_replaceable(target)
        config = copy.deepcopy(self.config)
        config.lam, config.gate, config.backbone_copied = self.mixer.lam, self.gate is not None, copy_backbone
        if not copy_backbone and config.backbone is None:
            raise ConfigError("the backbone has no name or folder to refer to: save with copy_backbone=True")
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            self._write(tmp, config, copy_backbone)
            replace_dir(tmp, target, old=target.with_name(f".{target.name}.old{os.getpid()}"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    def _write(self, folder: Path, config: MemoryAugmentedConfig, copy_backbone: bool) -> None:
        if copy_backbone:
            self.backbone.save_pretrained(folder / BACKBONE_COPY)
            self.tokenizer.save_pretrained(folder / BACKBONE_COPY)
        save_memory(self.memory, folder / MEMORY_DIR)
        record_folder(folder / MEMORY_DIR, (CONFIG_NAME, WEIGHTS_NAME))
        if self.gate is not None:
            save_gate(self.gate, folder / GATE_DIR, self.memory)
        self.tokenizer.save_pretrained(folder)
        config.save_pretrained(folder)


def _context_length(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        if getattr(config, name, None) is not None:
            return int(getattr(config, name))
    return None


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


def _load_backbone(name: str, dtype: torch.dtype):
    """``load_backbone(name)``, with the hub client's own errors for a name that is no folder made one line."""
    try:
        return load_backbone(name, dtype=dtype)
    except ValueError as exc:
        if isinstance(exc, MlpmemError):
            raise
        raise MlpmemError(f"cannot load backbone {name!r}: {str(exc).splitlines()[0]}") from None


def _load_memory(folder: Path, model, tokenizer) -> MLPMemory:
    """The folder's memory: present, matching its recorded checksums, built on ``model``; on its device."""
    memory_dir = folder / MEMORY_DIR
    if not (memory_dir / CONFIG_NAME).is_file():
        raise CorruptArtifact(f"{folder} holds no memory: {memory_dir / CONFIG_NAME} is missing")
    verify_folder(memory_dir, f"memory {memory_dir}")
    memory = MLPMemory.from_pretrained(memory_dir, model, tokenizer)
    return memory.to(model_device(model)).eval()


def _single_device(device_map):
    """The one device a ``device_map`` names (None: leave the model where it loaded)."""
    if device_map is None or device_map == "auto":
        return None
    if isinstance(device_map, dict):
        devices = set(device_map.values())
        if len(devices) != 1:
            raise ConfigError(f"a memory-augmented model runs on one device, got device_map {device_map}")
        device_map = devices.pop()
    return torch.device(device_map if not isinstance(device_map, int) else f"cuda:{device_map}")


def _check_replaceable(target: Path) -> None:
    """Refuse to replace anything but a previous save (or an empty folder): the save replaces the folder whole."""
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError(f"cannot save to {target}: it exists and is not a folder")
    if any(target.iterdir()) and not (target / MEMORY_DIR).is_dir():
        raise ConfigError(f"refusing to replace {target}: it holds files and is not a saved memory-augmented model")


AutoConfig.register(MODEL_TYPE, MemoryAugmentedConfig, exist_ok=True)
AutoModelForCausalLM.register(MemoryAugmentedConfig, MemoryAugmentedForCausalLM, exist_ok=True)
