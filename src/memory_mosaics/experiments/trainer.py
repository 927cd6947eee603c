"""Training both model families with one recipe (accelerate, resumable, progress bar).

Every step draws ``batch_size`` windows of ``seq_len`` tokens at offsets, and the Memory Mosaics its
long-term gap m, from seeds that depend only on (seed, step), so a resumed run sees exactly the batches
of an uninterrupted one. AdamW (betas 0.9/0.95,
no decay on vectors), linear warmup then cosine decay (``mlpmem.training.optim.lr_at``), gradient clipping.
Checkpoints are safetensors + JSON only (``mlpmem.training.checkpoint.save_checkpoint``); the final model is saved
with ``save_pretrained`` under ``<out>/model``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from tqdm.auto import tqdm

from memory_mosaics.experiments.config import TrainSection
from memory_mosaics.experiments.data import (
    evaluation_starts,
    training_starts,
    window_batch,
)
from memory_mosaics.transformer import forward_documents
from mlpmem.compute import model_device
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.training.checkpoint import flat_moments, save_checkpoint
from mlpmem.training.optim import lr_at, optimizer_step
from mlpmem.utils.shards import read_json, write_json


@torch.no_grad()
def evaluate_loss(model, tokens: np.ndarray, docs: np.ndarray, seq_len: int, max_windows: int = 0,
                  batch_size: int = 8) -> dict:
    """Mean next-token NLL and perplexity over non-overlapping, document-masked windows."""
    was_training = model.training
    model.eval()
    starts = evaluation_starts(len(tokens), seq_len)
    if max_windows:
        starts = starts[np.linspace(0, len(starts) - 1, min(max_windows, len(starts))).astype(int)]
    total, count, device = 0.0, 0, model_device(model)
    for a in range(0, len(starts), batch_size):
        batch = {k: v.to(device) for k, v in window_batch(tokens, docs, starts[a : a + batch_size], seq_len).items()}
        logits = forward_documents(model, batch["input_ids"], batch["doc_ids"]).logits.float()
        labels = batch["labels"][:, 1:]
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten(),
                                                ignore_index=-100, reduction="sum")
        total, count = total + nll.item(), count + int((labels != -100).sum())
    model.train(was_training)
    return {"nll": total / max(count, 1), "ppl": math.exp(total / max(count, 1)), "tokens": count}


def _optimizer(model, cfg: TrainSection) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def _load_checkpoint(folder: Path, model, optimizer) -> dict:
    try:
        weights = load_file(str(folder / "memory" / "model.safetensors"))
        moments = load_file(str(folder / "optimizer.safetensors"))
    except Exception as exc:
        raise CorruptArtifact(f"checkpoint {folder} is unreadable: {str(exc).splitlines()[0]}") from None
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any(k != "lm_head.weight" for k in missing):  # only a tied head may be absent
        raise CorruptArtifact(f"checkpoint {folder} does not hold this model's tensors")
    model.tie_weights()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for key, value in moments.items():
        index, name = key.split(".", 1)
        optimizer.state[params[int(index)]][name] = value
    return read_json(folder / "trainer_state.json", "trainer state")


def train_model(model, streams: dict, cfg: TrainSection, out_dir: str | Path, seed: int = 0, name: str = "model",
                progress: bool = True, stop_after: int | None = None) -> dict:
    """Train ``model`` in place on ``streams['train']``; resumes from ``out_dir/checkpoint`` if present."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    optimizer = _optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg.steps, cfg))
    ckpt = out_dir / "checkpoint"
    state = {"step": 0, "history": [], "train_seconds": 0.0, "config": asdict(cfg), "seed": seed}
    if (ckpt / "trainer_state.json").exists():
        state = _load_checkpoint(ckpt, model, optimizer)
        if state["config"] != asdict(cfg) or state["seed"] != seed:
            raise ConfigError(f"checkpoint {ckpt} was trained with another recipe; use another out_dir")
        for group in optimizer.param_groups:
            group["initial_lr"] = cfg.lr
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg.steps, cfg),
                                                      last_epoch=state["step"] - 1)
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens, docs = streams["train"]
    step = state["step"]
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {name}", unit="step", disable=not progress,
               dynamic_ncols=True)
    t_start = time.perf_counter() - state["train_seconds"]
    while step < cfg.steps:
        starts = training_starts(len(tokens), cfg.seq_len, cfg.batch_size, seed, step)
        batch = {k: v.to(accelerator.device) for k, v in window_batch(tokens, docs, starts, cfg.seq_len).items()}
        model.train()
        torch.manual_seed(seed * 1_000_003 + step)  # the long-gap draw m of this step, identical after a resume
        loss = forward_documents(model, batch["input_ids"], batch["doc_ids"], batch["labels"]).loss
        accelerator.backward(loss)
        optimizer_step(accelerator, optimizer, scheduler, model.parameters(), cfg.grad_clip)
        step += 1
        elapsed = time.perf_counter() - t_start
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{step * cfg.batch_size * cfg.seq_len / elapsed:.0f}")
        record = {"step": step, "loss": loss.item(), "lr": scheduler.get_last_lr()[0]}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            record["val"] = evaluate_loss(accelerator.unwrap_model(model), *streams["validation"], cfg.seq_len,
                                          cfg.eval_windows)
            bar.write(f"{name} step {step}: train loss {loss.item():.3f}, validation PPL {record['val']['ppl']:.2f}")
        state["history"].append(record)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            state.update(step=step, train_seconds=time.perf_counter() - t_start)
            if accelerator.is_main_process:
                save_checkpoint(ckpt, accelerator.unwrap_model(model), flat_moments(optimizer), state)
        if stop_after is not None and step >= stop_after:
            break
    bar.close()
    seconds = time.perf_counter() - t_start
    state.update(step=step, train_seconds=seconds, tokens_per_s=step * cfg.batch_size * cfg.seq_len / seconds)
    if step >= cfg.steps:
        accelerator.unwrap_model(model).save_pretrained(out_dir / "model")
    write_json(out_dir / "train_state.json", state)
    return state
