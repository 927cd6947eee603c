"""Continued pretraining (CPT): full fine-tuning of the backbone on the memory corpus, next-token loss.

The corpus documents are tokenized as in the datastore (a document-start token before each document),
concatenated, and cut into blocks of ``block_size`` tokens; AdamW with linear warm-up and linear decay.
:func:`finetune_causal_lm` is shared with the LoRA baseline (it trains whatever parameters require
gradients). The model is trained in place: pass a copy to keep the backbone intact.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem.compute import model_device
from mlpmem.config import Config
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.errors import ConfigError


@dataclass
class FinetuneConfig(Config):
    epochs: int = 2
    lr: float = 5e-5
    batch_size: int = 8
    block_size: int = 256
    weight_decay: float = 0.0
    warmup_fraction: float = 0.05
    seed: int = 0

    def validate(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.block_size < 2:
            raise ConfigError("finetune epochs and batch_size must be >= 1, block_size >= 2")
        if not self.lr > 0 or not 0 <= self.warmup_fraction < 1:
            raise ConfigError("finetune lr must be > 0 and warmup_fraction in [0, 1)")


def pack_blocks(token_docs: list[np.ndarray], block_size: int) -> torch.Tensor:
    """All documents concatenated and cut into ``(n_blocks, block_size)`` (the tail is kept, padded with -100)."""
    flat = np.concatenate(token_docs).astype(np.int64)
    n = math.ceil(len(flat) / block_size)
    blocks = np.full(n * block_size, -100, dtype=np.int64)
    blocks[: len(flat)] = flat
    return torch.from_numpy(blocks.reshape(n, block_size))


def _lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def count_trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def finetune_causal_lm(model, tokenizer, docs, cfg: FinetuneConfig, progress: bool = True) -> dict:
    """Train ``model``'s trainable parameters on ``docs`` (strings or ``{"text"}``) with the causal-LM loss."""
    torch.manual_seed(cfg.seed)
    texts = [d["text"] if isinstance(d, dict) else d for d in docs]
    blocks = pack_blocks(tokenize_documents([Document(str(i), t) for i, t in enumerate(texts)], tokenizer),
                         cfg.block_size)  # (n, block)
    params = [p for p in model.parameters() if p.requires_grad]
    device = model_device(model)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(blocks) / cfg.batch_size)
    total, warmup = steps_per_epoch * cfg.epochs, int(cfg.warmup_fraction * steps_per_epoch * cfg.epochs)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, total, warmup))
    gen = torch.Generator().manual_seed(cfg.seed)
    model.train()
    losses, t0 = [], time.perf_counter()
    bar = tqdm(total=total, desc="finetune", unit="step", disable=not progress, dynamic_ncols=True)
    for _ in range(cfg.epochs):
        order = torch.randperm(len(blocks), generator=gen)
        for start in range(0, len(blocks), cfg.batch_size):
            batch = blocks[order[start : start + cfg.batch_size]].to(device)  # (B, block)
            mask = (batch != -100).long()
            loss = model(input_ids=batch.clamp_min(0), attention_mask=mask, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    seconds = time.perf_counter() - t0
    tokens = int((blocks != -100).sum()) * cfg.epochs
    return {"train_seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / max(seconds, 1e-9),
            "steps": total, "first_loss": losses[0], "last_loss": float(np.mean(losses[-steps_per_epoch:])),
            "trainable_parameters": count_trainable(model)}


def train_cpt(model, tokenizer, docs, cfg: FinetuneConfig | None = None, progress: bool = True) -> dict:
    """Continued pretraining: every parameter of ``model`` trained on ``docs`` (in place)."""
    for p in model.parameters():
        p.requires_grad_(True)
    stats = finetune_causal_lm(model, tokenizer, docs, cfg or FinetuneConfig(), progress)
    for p in model.parameters():
        p.requires_grad_(False)
    stats["inference_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())  # a whole new model
    return stats
