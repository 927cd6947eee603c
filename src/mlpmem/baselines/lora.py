"""LoRA baseline (peft) on the attention and MLP projections, rank matched to the memory's trainable parameters.

A LoRA adapter of rank r on a linear map ``in -> out`` adds ``r * (in + out)`` trainable parameters, so
over the target modules the count is ``r * Σ (in + out)``. :func:`lora_rank_for` picks the integer r
whose count is closest to the memory's trainable parameters (at least 1). Training reuses the CPT loop
(:func:`~mlpmem.baselines.cpt.finetune_causal_lm`); the adapter is merged into the weights afterwards,
so inference costs the same as the backbone and needs the adapter's bytes besides it. The merged model keeps
the adapter's files as peft writes them (``model.lora_adapter_files``), so that
:func:`~mlpmem.baselines.finetuned.save_finetuned` can save the adapter rather than a whole model.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from mlpmem.baselines.cpt import FinetuneConfig, finetune_causal_lm
from mlpmem.config import Config
from mlpmem.errors import ConfigError

ADAPTER_FILES_ATTR = "lora_adapter_files"
"""Attribute of a merged LoRA model: ``{file name: bytes}`` of its adapter folder (peft's ``save_pretrained``)."""
TARGETS = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}


@dataclass
class LoRAConfig(Config):
    finetune: FinetuneConfig = field(default_factory=lambda: FinetuneConfig(lr=3e-4))
    alpha_over_rank: float = 2.0
    """lora_alpha = alpha_over_rank * r (so the update's scale does not change with r)."""
    dropout: float = 0.0
    target_modules: list[str] | None = None
    """Module names to adapt; default: attention + MLP projections of the backbone's family."""

    def validate(self) -> None:
        if self.alpha_over_rank <= 0 or not 0 <= self.dropout < 1:
            raise ConfigError("lora alpha_over_rank must be > 0 and dropout in [0, 1)")


def default_targets(model: nn.Module) -> list[str]:
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    for targets in TARGETS.values():
        if set(targets) <= names:
            return list(targets)
    raise ConfigError("cannot find attention/MLP projections to adapt; set lora.target_modules")


def _in_out(module: nn.Module) -> tuple[int, int] | None:
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":  # GPT-2: weight (in, out)
        return tuple(module.weight.shape)
    return None


def params_per_rank(model: nn.Module, targets: list[str]) -> int:
    """Σ (in + out) over the modules named in ``targets``: LoRA parameters per unit of rank."""
    total = 0
    for name, module in model.named_modules():
        shape = _in_out(module)
        if shape is not None and name.rsplit(".", 1)[-1] in targets:
            total += sum(shape)
    if total == 0:
        raise ConfigError(f"no linear module named {targets} in the model")
    return total


def lora_rank_for(model: nn.Module, target_parameters: int, targets: list[str] | None = None) -> int:
    """The rank whose LoRA parameter count is closest to ``target_parameters`` (>= 1)."""
    per_rank = params_per_rank(model, targets or default_targets(model))
    return max(1, round(target_parameters / per_rank))


def add_lora(model: nn.Module, rank: int, cfg: LoRAConfig | None = None):
    """``model`` wrapped by peft with LoRA adapters of rank ``rank`` (base weights frozen)."""
    from peft import LoraConfig, get_peft_model  # local: slow to import, and every QA method imports this module

    cfg = cfg or LoRAConfig()
    targets = cfg.target_modules or default_targets(model)
    peft_cfg = LoraConfig(r=rank, lora_alpha=cfg.alpha_over_rank * rank, lora_dropout=cfg.dropout,
                          target_modules=targets, bias="none", task_type="CAUSAL_LM",
                          fan_in_fan_out=targets == TARGETS["gpt2"])
    return get_peft_model(model, peft_cfg)


def adapter_files(peft_model) -> dict[str, bytes]:
    """The adapter folder peft's ``save_pretrained`` writes (``adapter_config.json``, ``adapter_model.safetensors``),
    as bytes: small (the adapter only), and written by peft itself, so ``PeftModel.from_pretrained`` reads it."""
    with tempfile.TemporaryDirectory() as tmp:
        peft_model.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.name.startswith("adapter_")}


def train_lora(model: nn.Module, tokenizer, docs, target_parameters: int, cfg: LoRAConfig | None = None,
               progress: bool = True):
    """Train a rank-matched LoRA on ``docs``; returns (merged model, stats). ``model`` is modified: pass a copy.
    The merged model carries the adapter's files (:data:`ADAPTER_FILES_ATTR`)."""
    cfg = cfg or LoRAConfig()
    rank = lora_rank_for(model, target_parameters, cfg.target_modules)
    peft_model = add_lora(model, rank, cfg)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    stats = finetune_causal_lm(peft_model, tokenizer, docs, cfg.finetune, progress)
    stats.update(rank=rank, trainable_parameters=trainable, target_parameters=target_parameters,
                 inference_bytes=trainable * 4)  # the fp32 adapter (merged at load time)
    files = adapter_files(peft_model)
    merged = peft_model.merge_and_unload()
    setattr(merged, ADAPTER_FILES_ATTR, files)
    merged.eval()
    for p in merged.parameters():
        p.requires_grad_(False)
    return merged, stats
