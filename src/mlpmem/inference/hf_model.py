"""The memory-augmented LM as a transformers model: ``MemoryAugmentedForCausalLM``, saved as one folder.

A frozen causal LM whose next-token distribution is mixed with an MLP Memory's, p = (1 - λ) p_lm + λ p_mem, in
ONE backbone pass (the hooks of :mod:`mlpmem.inference.hooks`): ``forward`` returns the mixed log-probabilities
as ``logits`` and ``generate`` is the backbone's stock ``generate`` run under the hooks (greedy, sampling, beam
search, batches with left padding, KV cache), with the fused tied head and the learned gate on every path.
Being a ``PreTrainedModel`` it has what transformers' tools expect of a model (``device``, ``config``,
``generation_config``): ``pipeline("text-generation", model=...)`` and lm-evaluation-harness's ``hf`` model type
take it as it is.

A saved folder::

    folder/
      config.json              MemoryAugmentedConfig: backbone reference, fingerprint, λ, gate, key layer/site,
                               and ``auto_map`` naming modeling_mlpmem.py
      modeling_mlpmem.py       transformers' remote code: imports these classes from the installed mlpmem
      tokenizer files          the backbone's tokenizer (AutoTokenizer.from_pretrained(folder) works)
      memory/                  the memory (config.json + model.safetensors, mlpmem.memory.io)
      memory.sha256.json       the checksums of memory/'s files, checked when it loads
      gate/                    the learned gate, if any (gate.json + gate.safetensors, bound to the memory)
      backbone/                the backbone itself, only when saved with ``copy_backbone=True``
      mlpmem-files.json        every file the save wrote (written last): a later save replaces nothing else

Importing this module registers the ``mlpmem`` model type with ``AutoConfig`` and ``AutoModelForCausalLM``
(as any package registers its own model type), so ``AutoModelForCausalLM.from_pretrained(folder)`` works
once ``import mlpmem.inference.hf_model`` (or ``import mlpmem.evaluation.harness``) has run. A process that
never imports mlpmem (lm-eval's own ``lm_eval --model hf`` command, any stock tool) loads the folder with
``trust_remote_code=True``: transformers' custom-model convention, ``auto_map`` pointing at the folder's
``modeling_mlpmem.py``, whose only code imports these classes (mlpmem must be installed;
:func:`~mlpmem.inference.hf_folder.write_remote_code`).
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from mlpmem.backbone import SITES, check_fingerprint, fingerprint, resolve_layer
from mlpmem.errors import ConfigError, CorruptArtifact, FingerprintMismatch
from mlpmem.inference.gate import Gate
from mlpmem.inference.gate_io import load_gate, save_gate
from mlpmem.inference.hf_config import BACKBONE_COPY, MODEL_TYPE, MemoryAugmentedConfig
from mlpmem.inference.hf_folder import (
    GATE_DIR,
    MEMORY_DIR,
    backbone_reference,
    check_replaceable,
    check_save_kwargs,
    load_folder_memory,
    load_named_backbone,
    read_config,
    record_files,
    single_device,
    torch_dtype,
    write_remote_code,
)
from mlpmem.inference.hooks import BackboneWrapper, MixingHooks
from mlpmem.inference.mixing import check_lambda
from mlpmem.inference.positions import check_positions, context_length
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import CONFIG_NAME, WEIGHTS_NAME, save_memory, verify_backbone
from mlpmem.utils.checksums import record_folder
from mlpmem.utils.io import replace_dir


class MemoryAugmentedForCausalLM(MixingHooks, BackboneWrapper, PreTrainedModel, GenerationMixin):
    """A frozen causal LM mixed with an MLP Memory (fixed λ or a learned gate), as a transformers model.

    Build it with :meth:`from_parts` (a backbone and a memory), :meth:`from_memory` (a saved memory folder next to
    a backbone), :meth:`from_pretrained` (a folder :meth:`save_pretrained` wrote) or
    :func:`mlpmem.pipeline.hf_export.augmented_from_run` (a finished run folder). The parameters are the
    backbone's, the memory's and the gate's (``backbone.``, ``memory.``, ``gate.``); ``config.lam`` is λ.
    """

    config_class = MemoryAugmentedConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"

    def __init__(self, config: MemoryAugmentedConfig, backbone: nn.Module | None = None,
                 memory: MLPMemory | None = None, tokenizer=None, gate: Gate | None = None,
                 fuse_head: bool | None = None):
        if backbone is None or memory is None:
            raise ConfigError("MemoryAugmentedForCausalLM needs a backbone and a trained memory: use "
                              "from_parts(...), from_pretrained(folder) or "
                              "mlpmem.pipeline.hf_export.augmented_from_run(run_dir)")
        super().__init__(config)
        self.backbone, self.memory, self.tokenizer = backbone, memory, tokenizer
        self.generation_config = backbone.generation_config  # one object: what generate really uses
        self.fuse_head = self._resolve_fuse_head(fuse_head)
        self._reset_hooks()
        self.gate: Gate | None = None
        self.set_gate(gate)
        self.post_init()

    def init_weights(self):
        """Nothing to initialise: the backbone and the memory come trained (and tied) from their own loading."""

    def tie_weights(self, *args, **kwargs):
        """Nothing to tie: the backbone tied its weights when it loaded, and a tied memory head IS its embedding."""

    @classmethod
    def from_parts(cls, backbone: nn.Module, memory: MLPMemory, lam: float = 0.5, key_layer: int | float | None = None,
                   key_site: str | None = None, tokenizer=None, fuse_head: bool | None = None,
                   gate: Gate | None = None, backbone_name: str | None = None) -> MemoryAugmentedForCausalLM:
        """``memory`` mixed into ``backbone`` at ``lam`` (or at the ``gate``'s λ_t), in eval mode.

        ``key_layer``/``key_site`` default to the ones recorded in ``memory.config``; if both are given they
        must agree (else FingerprintMismatch), as must the recorded backbone fingerprint (``tokenizer`` optional:
        without it the tokenizer part is not checked, and the model cannot be saved). ``fuse_head`` (default:
        whenever the memory's head is tied to the backbone's output embedding) computes both vocabulary
        projections in one matrix product; ``False`` runs the memory's own head separately (same result up to
        rounding). ``backbone_name`` is how a save refers to the backbone (default: :func:`backbone_reference`).
        """
        if memory.config.backbone is not None:
            verify_backbone(memory.config.backbone, backbone, tokenizer, "the memory")
        vocab = int(backbone.get_output_embeddings().weight.shape[0])
        if vocab != memory.config.vocab_size:
            raise ConfigError(f"memory vocab_size {memory.config.vocab_size} differs from the backbone's {vocab}")
        config = MemoryAugmentedConfig(
            backbone=backbone_reference(backbone, backbone_name),
            backbone_fingerprint=None if tokenizer is None else fingerprint(backbone, tokenizer),
            lam=lam, gate=gate is not None, key_layer=_key_layer(backbone, memory, key_layer),
            key_site=_key_site(memory, key_site), max_position_embeddings=context_length(backbone.config),
            vocab_size=vocab,
        )
        return cls(config, backbone, memory, tokenizer, gate, fuse_head).eval()

    @classmethod
    def from_memory(cls, memory_dir: str | os.PathLike, backbone: nn.Module, tokenizer=None, lam: float = 0.5,
                    gate_dir: str | os.PathLike | None = None, **kwargs) -> MemoryAugmentedForCausalLM:
        """A saved memory folder loaded next to ``backbone`` (fingerprint checked) on the backbone's device, and the
        gate saved in ``gate_dir`` if given (refused unless it was trained with this memory); ``kwargs`` as for
        :meth:`from_parts`."""
        memory = MLPMemory.from_pretrained(memory_dir, backbone, tokenizer)
        gate = None if gate_dir is None else load_gate(gate_dir, memory)
        memory.to(next(backbone.parameters()).device).eval()
        return cls.from_parts(backbone, memory, lam=lam, tokenizer=tokenizer, gate=gate, **kwargs)

    # -- λ and the gate

    @property
    def lam(self) -> float:
        return self.config.lam

    @lam.setter
    def lam(self, lam: float) -> None:
        """Set the fixed λ of p_mem (in [0, 1], kept in the config so a save keeps it); with a gate set, the
        gate's λ_t are used instead."""
        self.config.lam = check_lambda(lam, "lam")

    @property
    def key_layer(self) -> int:
        return self.config.key_layer

    @property
    def key_site(self) -> str:
        return self.config.key_site

    def set_gate(self, gate: Gate | None) -> None:
        """Mix with the gate's λ_t per position (moved to the backbone's device), or with the fixed λ again
        (``None``)."""
        if gate is not None:
            if gate.uses_keys and gate.key_size != self.memory.config.input_size:
                raise ConfigError(f"the gate reads keys of size {gate.key_size}, the memory's are "
                                  f"{self.memory.config.input_size}")
            gate = gate.to(next(self.backbone.parameters()).device).eval()
        self.gate = gate
        self.config.gate = gate is not None

    @property
    def memory_needed(self) -> bool:
        """Whether the memory runs at all: with a gate, or with λ > 0."""
        return self.gate is not None or self.lam != 0.0

    def _resolve_fuse_head(self, fuse_head: bool | None) -> bool:
        head = self.backbone.get_output_embeddings()
        shared = self.memory.config.tie_head and self.memory.head.weight is head.weight
        if fuse_head and not shared:
            raise ConfigError("fuse_head needs a memory head tied to the backbone's output embedding")
        return shared if fuse_head is None else bool(fuse_head)

    # -- running

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def get_output_embeddings(self):
        return self.backbone.get_output_embeddings()

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        """The backbone's forward with log((1 - λ) p_LM + λ p_mem) as ``logits`` (and the loss on them)."""
        with self.active():
            return self.backbone(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    @torch.no_grad()
    def generate(self, inputs=None, **kwargs):
        """The backbone's stock ``generate`` on the mixed distribution (every decoding strategy, KV cache)."""
        if inputs is not None:
            kwargs["inputs"] = inputs
        self._check_positions(kwargs)
        with self.active():
            return self.backbone.generate(**kwargs)

    def _check_positions(self, kwargs: dict) -> None:
        """Refuse a generation whose prompt and new tokens would not fit in the backbone's positions."""
        ids = kwargs.get("input_ids", kwargs.get("inputs"))
        if not torch.is_tensor(ids):
            return
        new = kwargs.get("max_new_tokens", self.generation_config.max_new_tokens)
        if new is None:
            new = max(0, kwargs.get("max_length", self.generation_config.max_length or 0) - ids.shape[-1])
        check_positions(self.backbone.config, int(ids.shape[-1]), int(new))

    # -- loading and saving

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
        model, tokenizer = load_named_backbone(name, torch_dtype(dtype))
        if config.backbone_fingerprint is not None:
            check_fingerprint(config.backbone_fingerprint, fingerprint(model, tokenizer), f"the model in {folder}")
        memory = load_folder_memory(folder, model, tokenizer)
        gate = load_gate(folder / GATE_DIR, memory) if config.gate else None
        _key_layer(model, memory, config.key_layer)  # the folder's layer and site must be the memory's
        _key_site(memory, config.key_site)
        loaded = cls(config, model, memory, tokenizer, gate).eval()
        device = single_device(device_map)
        return loaded if device is None else loaded.to(device)

    def save_pretrained(self, save_directory, copy_backbone: bool = False, **kwargs) -> Path:
        """Write the folder (see the module docstring) atomically: ``save_directory`` is replaced whole, so it must
        be new, empty or an earlier save holding only the files that save recorded (a run folder, or a folder of the
        user's files, is refused in one line).

        The backbone is saved by reference unless ``copy_backbone`` (then into ``backbone/``); other keyword
        arguments of transformers' ``save_pretrained`` are accepted at their defaults only (anything else would be
        ignored: it is refused in one line).
        """
        check_save_kwargs(kwargs)
        if self.tokenizer is None:
            raise ConfigError("saving needs the backbone's tokenizer: build the model with tokenizer=...")
        target = Path(save_directory)
        check_replaceable(target)
        config = copy.deepcopy(self.config)
        config.lam, config.gate, config.backbone_copied = self.lam, self.gate is not None, copy_backbone
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
        write_remote_code(folder, config)
        config.save_pretrained(folder)
        record_files(folder)


def _key_layer(backbone: nn.Module, memory: MLPMemory, key_layer: int | float | None) -> int:
    """The layer the memory reads: the one it records, which ``key_layer`` (if given) must resolve to."""
    recorded = memory.config.key_layer
    if key_layer is None and recorded is None:
        raise ConfigError("key_layer is needed: the memory config does not record one")
    layer = resolve_layer(backbone, recorded if key_layer is None else key_layer)
    if recorded is not None and layer != recorded:
        raise FingerprintMismatch(f"the memory was trained on keys of layer {recorded}, not layer {layer}")
    return layer


def _key_site(memory: MLPMemory, key_site: str | None) -> str:
    """The site the memory reads: the one it records, which ``key_site`` (if given) must be."""
    recorded = memory.config.key_site
    site = key_site or recorded or "ffn_input"
    if site not in SITES:
        raise ConfigError(f"key_site must be one of {SITES}, got {site!r}")
    if recorded is not None and site != recorded:
        raise FingerprintMismatch(f"the memory was trained on {recorded!r} keys, not {site!r}")
    return site


AutoConfig.register(MODEL_TYPE, MemoryAugmentedConfig, exist_ok=True)
AutoModelForCausalLM.register(MemoryAugmentedConfig, MemoryAugmentedForCausalLM, exist_ok=True)
