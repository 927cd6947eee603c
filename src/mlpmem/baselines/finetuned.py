"""Fine-tuned baselines on disk: :func:`save_finetuned` writes CPT's whole model or LoRA's peft adapter,
:func:`load_finetuned` loads either on a run's backbone (for ``mlpmem lm-eval --model-args method=cpt|lora``).

The QA suite saves the ones it trains in ``<out_dir>/<benchmark>/weights/{cpt,lora}``. To produce a folder elsewhere::

    built = build_method("cpt", run_dir, (model, tokenizer), MethodOptions(docs=docs))   # or "lora"
    save_finetuned(built, "finetuned/cpt", tokenizer)

  - CPT: the whole fine-tuned model (``model.save_pretrained``: ``config.json`` + ``model.safetensors``);
  - LoRA: the adapter only, as peft writes it (``adapter_config.json`` + ``adapter_model.safetensors``), from the
    files :func:`~mlpmem.baselines.lora.train_lora` keeps on its merged model (or from an unmerged ``PeftModel``);
    loading puts it on the run's backbone with ``PeftModel.from_pretrained`` and merges it, as the QA suite does;

plus the tokenizer and :data:`RECORD`: the method and the backbone's fingerprint (without the weights' hash for
CPT, whose weights are the fine-tuned ones). A folder for another backbone (another architecture or tokenizer;
for LoRA also other base weights) is refused with one line, before anything loads when the record is there,
else by comparing the loaded model's architecture with the backbone's.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn
from transformers import AutoModelForCausalLM

from mlpmem.backbone import check_fingerprint, fingerprint
from mlpmem.baselines.lora import ADAPTER_FILES_ATTR
from mlpmem.errors import ConfigError, FingerprintMismatch
from mlpmem.utils.shards import read_json, write_json

RECORD = "mlpmem_finetuned.json"
"""``{"method": "cpt" | "lora", "backbone": fingerprint}``, written next to the weights."""
ADAPTER_CONFIG = "adapter_config.json"
ARCHITECTURE = ("model_type", "hidden_size", "num_layers", "vocab_size")
"""The fingerprint keys any checkpoint of the same backbone shares, fine-tuned or not."""


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def save_finetuned(built_or_model, folder: str | Path, tokenizer) -> Path:
    """Save a fine-tuned CPT model, a merged LoRA model of ``train_lora`` (its adapter) or a ``PeftModel`` (its
    adapter) with ``tokenizer`` and :data:`RECORD` in ``folder``; returns ``folder``."""
    model = built_or_model if isinstance(built_or_model, nn.Module) else built_or_model.model  # or a Built
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = getattr(model, ADAPTER_FILES_ATTR, None)
    if _is_peft(model):
        model.save_pretrained(folder)  # the adapter only
        method, base = "lora", model.get_base_model()
    elif files is not None:
        for name, data in files.items():
            (folder / name).write_bytes(data)
        method, base = "lora", model  # merged: its non-adapted weights are the backbone's
    else:
        model.save_pretrained(folder)  # safetensors
        method, base = "cpt", model
    tokenizer.save_pretrained(folder)
    backbone = fingerprint(base, tokenizer)
    if method == "cpt":
        del backbone["weights_sha"]  # fine-tuned embeddings: only the architecture and tokenizer identify it
    write_json(folder / RECORD, {"method": method, "backbone": backbone})
    return folder


def _check_folder(method: str, folder: Path) -> None:
    if not folder.is_dir():
        raise ConfigError(f"weights={folder}: no such folder (write one with mlpmem.baselines.finetuned."
                          "save_finetuned)")
    adapter = (folder / ADAPTER_CONFIG).is_file()
    if method == "cpt" and adapter:
        raise ConfigError(f"weights={folder} is a LoRA adapter ({ADAPTER_CONFIG}): use method=lora")
    if method == "lora" and not adapter:
        raise ConfigError(f"weights={folder} holds no LoRA adapter ({ADAPTER_CONFIG} is missing)")
    if method == "cpt" and not (folder / "config.json").is_file():
        raise ConfigError(f"weights={folder} holds no model (config.json is missing)")


def _check_record(method: str, folder: Path, expected: dict) -> None:
    """The recorded backbone against the run's (before anything loads)."""
    if not (folder / RECORD).is_file():
        return
    record = read_json(folder / RECORD, "fine-tuned weights record")
    if record.get("method") != method:
        raise ConfigError(f"weights={folder} holds {record.get('method')} weights, not {method}")
    check_fingerprint(record["backbone"], expected, f"weights={folder}")


def load_finetuned(method: str, folder: str | Path, backbone: tuple) -> nn.Module:
    """The ``cpt`` or ``lora`` model saved in ``folder``, for ``backbone = (model, tokenizer)`` (the run's).
    LoRA is loaded onto ``backbone``'s model itself and merged into it: pass a copy to keep the backbone."""
    from peft import PeftModel  # local: slow to import

    if method not in ("cpt", "lora"):
        raise ConfigError(f"fine-tuned weights are method cpt or lora, not {method}")
    folder = Path(folder).expanduser()
    _check_folder(method, folder)
    model, tokenizer = backbone
    expected = fingerprint(model, tokenizer)
    _check_record(method, folder, expected)
    try:
        if method == "cpt":
            loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=model.dtype)
        else:
            loaded = PeftModel.from_pretrained(model, folder).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise FingerprintMismatch(f"weights={folder} do not load on the backbone "
                                  f"{expected['name']!r}: {str(exc).strip().splitlines()[0]}") from None
    actual = fingerprint(loaded, tokenizer)
    for key in ARCHITECTURE:  # a folder without a record, or one whose record was edited
        if actual[key] != expected[key]:
            raise FingerprintMismatch(f"weights={folder} are for another backbone than {expected['name']!r}: "
                                      f"{key} {actual[key]} vs {expected[key]}")
    # eval mode; the parameters keep requires_grad (scoring runs under no_grad) so that bf16 autocast can keep
    # their cast copies for a whole scoring call (mlpmem.compute.inference_scope)
    loaded.eval()
    return loaded
