"""Training the MLP Memory to imitate the kNN teacher: α·KL(p_kNN ‖ p_mem) + (1−α)·CE(w_t).

Inputs are the stored keys of the datastore and the sparse teacher rows (never a dense
[tokens, vocab] target). Each epoch visits every position once in a seeded order that depends only on
(seed, epoch), so a run resumed from a checkpoint sees exactly the batches an uninterrupted run sees.
AdamW, linear warmup then cosine or linear decay, gradient clipping. Validation is evaluated at every epoch
end (and every ``eval_every`` of an epoch); the best evaluation's weights are kept, and the run may stop
early and end with them (:mod:`mlpmem.training.selection`). The loop runs under ``accelerate``: launched
with N processes (``accelerate launch`` / ``torchrun``) it is data-parallel (DDP): every process takes
every N-th row of each batch of the shared order, reads only those rows from the memory-mapped shards,
and scales its loss by ``N · n_rank / n_batch`` so that DDP's gradient average is exactly the gradient of
the whole batch's mean loss; 1 and N processes then take the same steps up to float summation order.
With ``sharding: fsdp`` the N processes instead train a copy of the memory sharded with PyTorch FSDP2
(parameters, gradients and AdamW moments split across processes; same rows, weights and steps as DDP).
Checkpoints: :mod:`mlpmem.training.checkpoint`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from tqdm.auto import tqdm

from mlpmem.compute import autocast, resolve_precision
from mlpmem.memory.model import MLPMemory
from mlpmem.training.checkpoint import (
    STATE_FILE,
    TrainState,
    flat_moments,
    load_checkpoint,
    recover_checkpoint,
    save_checkpoint,
)
from mlpmem.training.config import TrainConfig, recipe
from mlpmem.training.data import EvalData, TrainData, evaluate, rank_rows
from mlpmem.training.loss import DEFAULT_CHUNK as FUSED_CHUNK
from mlpmem.training.loss import fused_head_loss, sparse_hybrid_loss
from mlpmem.training.optim import adamw, lr_schedule, optimizer_step
from mlpmem.training.selection import (
    BEST,
    SELECTION,
    eval_interval,
    is_eval_step,
    record_evaluation,
    restore_best,
    tokens_seen,
)
from mlpmem.training.sharding import gather_checkpoint, return_large_frees_to_os, shard_memory, unshard_into
from mlpmem.utils.shards import write_json

CHECKPOINT = "checkpoint"
"""The folder under a training ``out_dir`` that holds the resumable checkpoint."""


@dataclass
class _Loop:
    """What one training run holds across its steps: the (possibly wrapped or sharded) model, the unsharded
    memory process 0 saves, the optimizer and schedule, and the progress bar."""

    accelerator: Accelerator
    model: torch.nn.Module
    whole: MLPMemory
    optimizer: torch.optim.Optimizer
    scheduler: object
    trainable: list[torch.nn.Parameter]
    sharded: bool
    bar: tqdm


def train_memory(memory: MLPMemory, data: TrainData, val: EvalData, cfg: TrainConfig, out_dir: str | Path,
                 progress: bool = True, stop_after: int | None = None, memory_spec: dict | None = None) -> dict:
    """Train ``memory`` in place; checkpoints and history go to ``out_dir``; resumes if a checkpoint exists.

    ``stop_after`` ends the run after that many steps (as a kill would), for tests. With ``cfg.sharding ==
    "fsdp"`` and several processes a sharded copy is trained (:func:`shard_memory`) and ``memory`` receives its
    full weights at the end on every process, as under DDP. ``memory_spec`` (the pipeline's ``memory:``
    section, as a dict) is recorded with the train config: a checkpoint resumes only under both. Returns the
    final :class:`TrainState` as a dict (what ``train_state.json`` holds).
    """
    steps_per_epoch = math.ceil(data.rows_per_epoch / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    interval = eval_interval(cfg, steps_per_epoch, total)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    home = memory.head.weight.device  # a tied head lives with the backbone: the memory returns there
    loop, state = _start(memory, cfg, out_dir / CHECKPOINT, total, memory_spec, progress)
    step = state.step
    t_start = time.perf_counter() - state.train_seconds
    while step < total and not state.stopped:
        parts = _train_step(loop, data, cfg, step, steps_per_epoch)
        step += 1
        loop.bar.update(1)
        loop.bar.set_postfix(loss=f"{parts['loss'].item():.3f}", kl=f"{parts['kl'].item():.3f}",
                             ce=f"{parts['ce'].item():.3f}",
                             tok_s=f"{step * cfg.batch_size / max(time.perf_counter() - t_start, 1e-9):.0f}")
        improved = evaluated = is_eval_step(step, steps_per_epoch, interval)
        if evaluated:
            entry = {"epoch": _epoch_label(step, steps_per_epoch), "step": step,
                     "tokens_seen": tokens_seen(step, steps_per_epoch, cfg.batch_size, data.rows_per_epoch),
                     "loss": parts["loss"].item()}
            improved = validate(loop.accelerator, loop.model if loop.sharded else loop.whole, val, cfg, state,
                                loop.bar, entry, loop.sharded)
        if evaluated or step % cfg.checkpoint_every == 0 or step == total:  # evaluated: the counters are saved
            state.step, state.train_seconds = step, time.perf_counter() - t_start
            _save(loop, memory, out_dir, state, improved)
        if stop_after is not None and step >= stop_after:
            break
    state = _finish(loop, memory, cfg, out_dir, state, step, total, t_start)
    memory.to(home)  # trained on the accelerator's device (a GPU where there is one)
    return state.as_dict()


def _start(memory: MLPMemory, cfg: TrainConfig, ckpt: Path, total: int, memory_spec: dict | None,
           progress: bool) -> tuple[_Loop, TrainState]:
    """The run's accelerator, optimizer, schedule and model (wrapped for DDP or sharded for FSDP), and the
    trainer state to start from (the checkpoint's when there is one)."""
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    sharded = cfg.sharding == "fsdp" and accelerator.num_processes > 1
    if sharded and accelerator.device.type == "cpu":
        return_large_frees_to_os()
    optimizer = adamw(memory, cfg)
    state = resume_state(accelerator, ckpt, memory, optimizer, cfg, memory_spec)
    if sharded:
        model, optimizer = shard_memory(memory, optimizer, cfg, accelerator.device.type)
    scheduler = lr_schedule(optimizer, total, cfg, state.step)
    if not sharded:
        model, optimizer = accelerator.prepare(memory, optimizer)
    whole = memory if sharded else accelerator.unwrap_model(model)  # the unsharded memory, saved by process 0
    bar = tqdm(total=total, initial=state.step, desc="train memory", unit="step", disable=not progress,
               dynamic_ncols=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return _Loop(accelerator, model, whole, optimizer, scheduler, trainable, sharded, bar), state


def _train_step(loop: _Loop, data: TrainData, cfg: TrainConfig, step: int, steps_per_epoch: int) -> dict:
    """One optimizer step on this process's rows of the step's batch (the seeded order of its epoch)."""
    epoch, in_epoch = divmod(step, steps_per_epoch)
    order = data.epoch_order(cfg.seed, epoch)
    idx = order[in_epoch * cfg.batch_size : (in_epoch + 1) * cfg.batch_size]
    accelerator = loop.accelerator
    mine, weight = rank_rows(idx, accelerator.process_index, accelerator.num_processes)
    batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in data.batch(mine).items()}
    dropout_seed = int(np.random.SeedSequence([cfg.seed, step]).generate_state(1)[0])  # depends on (seed, step) only
    torch.manual_seed(dropout_seed + accelerator.process_index)
    loop.model.train()
    loss, parts = batch_loss(loop.model, loop.whole, batch, cfg, fused=cfg.fused_loss and not loop.sharded)
    accelerator.backward(loss * weight)
    optimizer_step(accelerator, loop.optimizer, loop.scheduler, loop.trainable, cfg.grad_clip, loop.sharded)
    return parts


def _epoch_label(step: int, steps_per_epoch: int) -> int | float:
    """Epoch ends keep their integer epoch; an evaluation within an epoch its fraction."""
    return step // steps_per_epoch if step % steps_per_epoch == 0 else round(step / steps_per_epoch, 4)


def _save(loop: _Loop, memory: MLPMemory, out_dir: Path, state: TrainState, improved: bool) -> None:
    """The checkpoint (process 0), after the best weights when this step's evaluation is the new best."""
    moments = gather_checkpoint(loop.model, loop.optimizer, memory) if loop.sharded else None
    if loop.accelerator.is_main_process:
        if improved:  # before the checkpoint that records it as the best
            loop.whole.save_pretrained(out_dir / BEST)
        save_checkpoint(out_dir / CHECKPOINT, loop.whole,
                        flat_moments(loop.optimizer) if moments is None else moments, state.as_dict())


def _finish(loop: _Loop, memory: MLPMemory, cfg: TrainConfig, out_dir: Path, state: TrainState, step: int,
            total: int, t_start: float) -> TrainState:
    """Full weights into ``memory`` (the best ones when the run ended and restores them), the final state
    written by process 0 and returned."""
    loop.bar.close()
    if loop.sharded:
        unshard_into(loop.model, memory)
    restored = (step >= total or state.stopped) and cfg.restores_best() and state.best_step is not None
    loop.accelerator.wait_for_everyone()  # process 0 wrote best/
    if restored:
        restore_best(memory, out_dir / BEST)
    # the time to the last step, as its checkpoint recorded it: a finished run resumed again (no step taken)
    # keeps the seconds it was trained in instead of adding the time it took to read it
    seconds = state.train_seconds if step == state.step else time.perf_counter() - t_start
    state.step, state.train_seconds = step, seconds
    state.tokens_per_s = step * cfg.batch_size / max(seconds, 1e-9)
    state.processes, state.sharding = loop.accelerator.num_processes, cfg.sharding
    state.stopped_early, state.restored_best = state.stopped and step < total, restored
    if loop.accelerator.is_main_process:
        write_json(out_dir / "train_state.json", state.as_dict())
    loop.accelerator.wait_for_everyone()
    return state


def batch_loss(model: torch.nn.Module, memory: MLPMemory, batch: dict, cfg: TrainConfig, fused: bool):
    """The batch's hybrid loss and its parts; ``model`` is the (possibly wrapped) ``memory``."""
    teacher = (batch["teacher_ids"], batch["teacher_probs"], batch["teacher_residual"], batch["targets"])
    with autocast(model, cfg.precision):  # not accelerate's mixed_precision: that is fixed per process
        out = model(batch["keys"], head=not fused, full_vocab=False)  # (B, H) features, or (B, V') head logits
    if not fused:  # token ids in ``batch`` are head rows (a corpus head scores only its tokens)
        return sparse_hybrid_loss(out, *teacher, cfg.alpha, cfg.loss_chunk)
    head = memory.head
    dtype = torch.bfloat16 if resolve_precision(cfg.precision, head.weight.device) == "bf16" else torch.float32
    return fused_head_loss(out.float(), head.weight, head.bias, *teacher, cfg.alpha,
                           chunk_size=cfg.loss_chunk or FUSED_CHUNK, compute_dtype=dtype)


def resume_state(accelerator, ckpt: Path, memory: MLPMemory, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                 memory_spec: dict | None) -> TrainState:
    """The trainer state to start from: a fresh one, or the checkpoint's (weights and moments restored into
    ``memory`` and ``optimizer``), which must have been trained with the same recipe."""
    built_from = recipe(cfg, memory_spec)
    if accelerator.is_main_process:
        recover_checkpoint(ckpt)
    accelerator.wait_for_everyone()
    if not (ckpt / STATE_FILE).exists():
        return TrainState(built_from)
    state = load_checkpoint(ckpt, memory, optimizer)
    state.check_built_from(built_from, f"checkpoint {ckpt}")  # any sharding and number of processes
    return state


def validate(accelerator, model: torch.nn.Module, val: EvalData, cfg: TrainConfig, state: TrainState, bar,
             entry: dict, sharded: bool) -> bool:
    """Evaluate ``model`` on validation, append ``entry`` and the metrics to the history (process 0) and update
    the selection counters, the same on every process; True if this evaluation is the new best."""
    improved = False
    if sharded or accelerator.is_main_process:  # DDP: the other processes' weights are the same
        model.eval()  # sharded: every process joins the forward (it gathers the blocks); process 0 records
        metrics = evaluate(model, val, cfg.eval_lambdas)
    if accelerator.is_main_process:
        state.history.append({**entry, **metrics})
        improved = record_evaluation(state, entry["step"], metrics["joint_ppl"], cfg.patience)
        bar.write(f"epoch {entry['epoch']}: memory PPL {metrics['memory_ppl']:.3f}, joint PPL "
                  f"{metrics['joint_ppl']:.3f} at lambda={metrics['best_lambda']} "
                  f"(backbone {metrics['backbone_ppl']:.3f})" + (" (best)" if improved else ""))
    if accelerator.num_processes > 1:  # process 0 decides: every process stops at the same step
        selection, improved = broadcast_object_list([{k: getattr(state, k) for k in SELECTION}, improved])
        for key, value in selection.items():
            setattr(state, key, value)
    return improved
