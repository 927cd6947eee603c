"""Training the MLP Memory to imitate the kNN teacher: α·KL(p_kNN ‖ p_mem) + (1−α)·CE(w_t).

Inputs are the stored keys of the datastore and the sparse teacher rows (never a dense
[tokens, vocab] target). Each epoch visits every position once in a seeded order that depends only on
(seed, epoch), so a run resumed from a checkpoint sees exactly the batches an uninterrupted run sees.
AdamW, linear warmup then cosine decay, gradient clipping. The loop runs under ``accelerate``: launched
with N processes (``accelerate launch`` / ``torchrun``) it is data-parallel (DDP): every process takes
every N-th row of each batch of the shared order, reads only those rows from the memory-mapped shards,
and scales its loss by ``N · n_rank / n_batch`` so that DDP's gradient average is exactly the gradient of
the whole batch's mean loss; 1 and N processes then take the same steps up to float summation order.
With ``sharding: fsdp`` the N processes instead train a copy of the memory sharded with PyTorch FSDP2
(parameters, gradients and AdamW moments split across processes; same rows, weights and steps as DDP).
Checkpoints are safetensors only: the memory (``save_pretrained``), the optimizer moments and a JSON
trainer state holding the sha256 of both files, checked when the checkpoint is opened.
"""

from __future__ import annotations

import copy
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from mlpmem.backbone import autocast, check_precision
from mlpmem.config import Config
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.inference.mixing import check_lambda
from mlpmem.inference.perplexity import best_lambda, lambda_curve, perplexity
from mlpmem.memory.model import MLPMemory
from mlpmem.training.loss import check_alpha, sparse_hybrid_loss
from mlpmem.utils.shards import read_json, sha256_file, write_json, writing

SHARDINGS = ("ddp", "fsdp")
RUNTIME_KEYS = ("sharding",)
"""Train config keys that change how a run is executed, not what it computes: a checkpoint resumes under any."""


@dataclass
class TrainConfig(Config):
    preset: str = "small"
    """Memory depth preset: tiny (2 blocks), small (4), base (8, the paper's), large (15)."""
    num_layers: int | None = None
    intermediate_size: int | None = None
    tie_head: bool = True
    """Head = the backbone's output embedding, frozen (else an untied head trained from scratch)."""
    init: str = "backbone"
    """``random`` or ``backbone`` (blocks start from the backbone's MLPs above the key layer)."""
    alpha: float = 0.4
    epochs: int = 2
    batch_size: int = 512
    lr: float = 4e-4
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    min_lr_fraction: float = 0.1
    grad_clip: float = 1.0
    loss_chunk: int | None = None
    precision: str = "fp32"
    """``fp32`` or ``bf16`` (autocast: bf16 matmuls in the forward, fp32 weights, loss and optimizer)."""
    checkpoint_every: int = 200
    """Steps between checkpoints (and always at the end of an epoch)."""
    eval_lambdas: list[float] = field(default_factory=lambda: [round(0.05 * i, 2) for i in range(21)])
    seed: int = 0
    sharding: str = "ddp"
    """With N processes: ``ddp`` (every process holds the whole memory and its AdamW moments) or ``fsdp`` (they
    are sharded across processes, for memories too large for one device). Identical with 1 process."""

    def validate(self) -> None:
        check_alpha(self.alpha)
        for lam in self.eval_lambdas:
            check_lambda(lam, "train.eval_lambdas")
        if self.epochs < 1 or self.batch_size < 1 or self.checkpoint_every < 1:
            raise ConfigError("train epochs, batch_size and checkpoint_every must be >= 1")
        if not self.lr > 0 or self.grad_clip <= 0 or not 0 <= self.warmup_fraction < 1:
            raise ConfigError("train lr and grad_clip must be > 0 and warmup_fraction in [0, 1)")
        check_precision(self.precision)
        if self.init not in ("random", "backbone"):
            raise ConfigError(f"train.init must be random or backbone, got {self.init!r}")
        if self.sharding not in SHARDINGS:
            raise ConfigError(f"train.sharding must be ddp or fsdp, got {self.sharding!r}")


def recipe(config: dict) -> dict:
    """A train config (as a dict) without its :data:`RUNTIME_KEYS`: what a checkpoint must agree with."""
    return {k: v for k, v in config.items() if k not in RUNTIME_KEYS}


@dataclass
class TrainData:
    """Keys, next tokens and sparse teacher rows of every datastore position (memory-mapped or in RAM)."""

    keys: np.ndarray  # (N, d) fp16
    targets: np.ndarray  # (N,) int32
    teacher_ids: np.ndarray  # (N, K) int32
    teacher_probs: np.ndarray  # (N, K) fp16
    teacher_residual: np.ndarray  # (N,) fp32

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        idx = np.sort(idx)  # sorted reads are sequential in the memory map; order within a batch is irrelevant
        return {
            "keys": torch.from_numpy(self.keys[idx].astype(np.float32)),
            "targets": torch.from_numpy(self.targets[idx].astype(np.int64)),
            "teacher_ids": torch.from_numpy(self.teacher_ids[idx].astype(np.int64)),
            "teacher_probs": torch.from_numpy(self.teacher_probs[idx].astype(np.float32)),
            "teacher_residual": torch.from_numpy(self.teacher_residual[idx]),
        }


@dataclass
class EvalData:
    keys: np.ndarray  # (n, d)
    targets: np.ndarray  # (n,)
    lm_logprob: np.ndarray  # (n,)


@torch.no_grad()
def memory_logprobs(memory: MLPMemory, keys: np.ndarray, targets: np.ndarray, batch: int = 1024) -> np.ndarray:
    """log p_mem(target) for every row, in batches (only the target's log-prob is kept)."""
    out = np.empty(len(keys), np.float64)
    for b in range(0, len(keys), batch):
        logits = memory(torch.from_numpy(np.asarray(keys[b : b + batch], np.float32)))  # (B, V)
        tgt = torch.from_numpy(np.asarray(targets[b : b + batch], np.int64))
        out[b : b + batch] = (logits.gather(1, tgt[:, None])[:, 0] - torch.logsumexp(logits, 1)).double().numpy()
    return out


def evaluate(memory: MLPMemory, data: EvalData, lambdas: list[float]) -> dict:
    """Memory-only perplexity and the joint perplexity at each λ (mixed after softmax)."""
    lp_mem = memory_logprobs(memory, data.keys, data.targets)
    joint = lambda_curve(data.lm_logprob, lp_mem, lambdas)
    best = best_lambda(joint)
    return {"memory_ppl": perplexity(lp_mem), "backbone_ppl": perplexity(data.lm_logprob), "joint_ppl": joint[best],
            "best_lambda": best, "ppl_by_lambda": {str(k): v for k, v in joint.items()}}


def optimizer_step(accelerator, optimizer, scheduler, params, grad_clip: float, sharded: bool = False) -> None:
    """Clip the gradients of ``params`` (FSDP-``sharded``: on the global norm over all shards), step the optimizer
    and the schedule, clear the gradients."""
    if sharded:
        clip_sharded(list(params), grad_clip)
    else:
        accelerator.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def clip_sharded(params: list, max_norm: float) -> torch.Tensor:
    """Clip FSDP-sharded gradients to the global norm over all shards of all processes (collective)."""
    from torch.distributed.tensor import DTensor

    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if isinstance(norm, DTensor):  # a norm still partial over the shards is reduced here
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm


def adamw(memory: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters: weight decay on matrices, none on vectors (norms, biases)."""
    trainable = [p for p in memory.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.ndim >= 2]
    no_decay = [p for p in trainable if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def lr_schedule(optimizer, total: int, cfg: TrainConfig, step: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The :func:`lr_at` schedule over ``total`` steps, positioned after ``step`` steps (0 for a new run)."""
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.lr
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, total, cfg), last_epoch=step - 1)


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay to ``min_lr_fraction`` of the peak (a multiplier of lr)."""
    warm = max(1, int(cfg.warmup_fraction * total))
    if step < warm:
        return (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    return cfg.min_lr_fraction + (1 - cfg.min_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


# ---------------------------------------------------------------------------------------------
# Checkpoints (safetensors + JSON; nothing is unpickled)


CHECKPOINT_FILES = ("memory/model.safetensors", "optimizer.safetensors")


def flat_moments(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer state as checkpoint tensors ``{i.name}``, ``i`` the index of the parameter in the groups."""
    return _flatten([group["params"] for group in optimizer.param_groups], optimizer.state)


def _flatten(groups: list[list], state: dict) -> dict[str, torch.Tensor]:
    keys = [key for group in groups for key in group]
    return {f"{i}.{name}": torch.as_tensor(value).detach().clone().contiguous()
            for i, key in enumerate(keys) for name, value in state.get(key, {}).items()}


def save_checkpoint(folder: Path, memory: torch.nn.Module, moments: dict[str, torch.Tensor], state: dict) -> None:
    """Write the checkpoint (the model, the optimizer ``moments`` of :func:`flat_moments`, the trainer state) to
    ``<folder>.tmp``, then swap it in (a full disk leaves the previous one intact)."""
    tmp = folder.with_name(folder.name + ".tmp")
    with writing(tmp):
        _write_checkpoint(tmp, memory, moments, state)
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def _write_checkpoint(tmp: Path, memory: torch.nn.Module, moments: dict[str, torch.Tensor], state: dict) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    memory.save_pretrained(tmp / "memory")
    save_file(moments, str(tmp / "optimizer.safetensors"))
    files = {name: sha256_file(tmp / name) for name in CHECKPOINT_FILES}
    write_json(tmp / "trainer_state.json", dict(state, files=files))


def recover_checkpoint(folder: Path) -> None:
    """A kill between the two renames of :func:`save_checkpoint` leaves only ``<folder>.old``: put it back."""
    old = folder.with_name(folder.name + ".old")
    if not folder.exists() and (old / "trainer_state.json").exists():
        old.rename(folder)


def verify_checkpoint(folder: Path) -> dict:
    """The trainer state of a checkpoint whose files match the sha256 it records (older checkpoints, without
    checksums, are read as before)."""
    state = read_json(folder / "trainer_state.json", "trainer state")
    for name, digest in state.pop("files", {}).items():
        if not (folder / name).is_file() or sha256_file(folder / name) != digest:
            raise CorruptArtifact(f"checkpoint {folder}: {name} fails its checksum (truncated or corrupted)")
    return state


def load_checkpoint(folder: Path, memory: MLPMemory, optimizer: torch.optim.Optimizer) -> dict:
    """Restore the memory weights and optimizer moments saved by :func:`save_checkpoint`; return its state."""
    state = verify_checkpoint(folder)
    try:
        weights = load_file(str(folder / "memory" / "model.safetensors"))
        moments = load_file(str(folder / "optimizer.safetensors"))
    except Exception as exc:  # a truncated or foreign file: name it rather than train from a wrong state
        raise CorruptArtifact(f"checkpoint {folder} is unreadable: {str(exc).splitlines()[0]}") from None
    expected = {k for k in memory.state_dict() if not (memory.config.tie_head and k == "head.weight")}
    if set(weights) != expected:
        raise CorruptArtifact(f"checkpoint {folder} does not hold this memory's tensors")
    memory.load_state_dict(weights, strict=False)  # a tied head is the backbone's, not in the checkpoint
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for key, value in moments.items():
        index, name = key.split(".", 1)
        optimizer.state[params[int(index)]][name] = value
    return state


# ---------------------------------------------------------------------------------------------
# Sharded training (FSDP2)


def return_large_frees_to_os(threshold: int = 1 << 20) -> None:
    """Serve allocations of ``threshold`` bytes or more with their own memory maps (glibc ``M_MMAP_THRESHOLD``),
    so that freeing them returns the memory to the OS. On CPU, FSDP gathers and frees every block's full
    parameters at each step; glibc's heap otherwise keeps the freed buffers and the resident set grows past
    DDP's (measured by ``mlpmem bench-scale``). Same as ``MALLOC_MMAP_THRESHOLD_=1048576``; no-op off glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            pass


def shard_memory(memory: MLPMemory, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                 device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A copy of ``memory`` sharded with FSDP2 across all processes, and its AdamW holding ``optimizer``'s moments.

    Each block is one FSDP unit (gathered in turn in forward and backward); the root holds the input projection,
    the final norm and an untied head. Frozen parameters (a tied head, which is the backbone's embedding) are
    neither copied nor sharded. ``memory`` stays plain: it gets the full weights at checkpoints and at the end.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    frozen = {p for p in memory.parameters() if not p.requires_grad}
    model = copy.deepcopy(memory, {id(p): p for p in frozen})
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, ignored_params=frozen)
    fully_shard(model, mesh=mesh, ignored_params=frozen)
    sharded = adamw(model, cfg)
    if optimizer.state:  # resumed: every process read the checkpoint's full moments and keeps its shards of them
        full = get_optimizer_state_dict(memory, optimizer)
        set_optimizer_state_dict(model, sharded, full, options=StateDictOptions(full_state_dict=True))
    return model, sharded


def gather_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                      memory: MLPMemory) -> dict[str, torch.Tensor]:
    """Collective: process 0's plain ``memory`` gets the full weights of the sharded ``model``; returns the full
    optimizer moments in the checkpoint format of :func:`flat_moments` there (``{}`` on the other processes)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    weights = get_model_state_dict(model, options=options)  # gathered one tensor at a time, kept on process 0
    full = get_optimizer_state_dict(model, optimizer, options=options)
    if torch.distributed.get_rank() != 0:
        return {}
    memory.load_state_dict(weights, strict=False)  # a frozen (tied) head is not gathered: it is the backbone's
    return _flatten([group["params"] for group in full["param_groups"]], full["state"])


def unshard_into(model: torch.nn.Module, memory: MLPMemory) -> None:
    """Collective: every process's plain ``memory`` gets the full weights of the sharded ``model``."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, ignore_frozen_params=True)
    memory.load_state_dict(get_model_state_dict(model, options=options), strict=False)


# ---------------------------------------------------------------------------------------------
# The loop


def train_memory(memory: MLPMemory, data: TrainData, val: EvalData, cfg: TrainConfig, out_dir: str | Path,
                 progress: bool = True, stop_after: int | None = None) -> dict:
    """Train ``memory`` in place; checkpoints and history go to ``out_dir``; resumes if a checkpoint exists.

    ``stop_after`` ends the run after that many steps (as a kill would), for tests. With ``cfg.sharding ==
    "fsdp"`` and several processes a sharded copy is trained (:func:`shard_memory`) and ``memory`` receives its
    full weights at the end on every process, as under DDP.
    """
    from accelerate import Accelerator

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    sharded = cfg.sharding == "fsdp" and accelerator.num_processes > 1
    if sharded and accelerator.device.type == "cpu":
        return_large_frees_to_os()
    optimizer = adamw(memory, cfg)
    steps_per_epoch = math.ceil(len(data.targets) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    ckpt = out_dir / "checkpoint"
    state = {"step": 0, "history": [], "train_seconds": 0.0, "config": asdict(cfg)}
    if accelerator.is_main_process:
        recover_checkpoint(ckpt)
    accelerator.wait_for_everyone()
    if (ckpt / "trainer_state.json").exists():
        state = load_checkpoint(ckpt, memory, optimizer)
        if recipe(state["config"]) != recipe(asdict(cfg)):
            raise ConfigError(f"checkpoint {ckpt} was trained with another train config; use another folder")
        state["config"] = asdict(cfg)  # a checkpoint resumes under any sharding and number of processes
    if sharded:
        model, optimizer = shard_memory(memory, optimizer, cfg, accelerator.device.type)
    scheduler = lr_schedule(optimizer, total, cfg, state["step"])
    if not sharded:
        model, optimizer = accelerator.prepare(memory, optimizer)
    whole = memory if sharded else accelerator.unwrap_model(model)  # the unsharded memory, saved by process 0
    trainable = [p for p in model.parameters() if p.requires_grad]
    step = state["step"]
    bar = tqdm(total=total, initial=step, desc="train memory", unit="step", disable=not progress,
               dynamic_ncols=True)
    t_start = time.perf_counter() - state["train_seconds"]
    while step < total:
        epoch, in_epoch = divmod(step, steps_per_epoch)
        order = epoch_order(len(data.targets), cfg.seed, epoch)
        idx = order[in_epoch * cfg.batch_size : (in_epoch + 1) * cfg.batch_size]
        mine, weight = rank_rows(idx, accelerator.process_index, accelerator.num_processes)
        batch = data.batch(mine)
        model.train()
        with autocast(model, cfg.precision):  # not accelerate's mixed_precision: that is fixed per process
            logits = model(batch["keys"])  # (B, V)
        loss, parts = sparse_hybrid_loss(logits, batch["teacher_ids"], batch["teacher_probs"],
                                         batch["teacher_residual"], batch["targets"], cfg.alpha, cfg.loss_chunk)
        accelerator.backward(loss * weight)
        optimizer_step(accelerator, optimizer, scheduler, trainable, cfg.grad_clip, sharded)
        step += 1
        elapsed = time.perf_counter() - t_start
        bar.update(1)
        bar.set_postfix(loss=f"{parts['loss'].item():.3f}", kl=f"{parts['kl'].item():.3f}",
                        ce=f"{parts['ce'].item():.3f}", tok_s=f"{step * cfg.batch_size / max(elapsed, 1e-9):.0f}")
        end_of_epoch = step % steps_per_epoch == 0
        if end_of_epoch and (sharded or accelerator.is_main_process):  # DDP: the other processes' weights are the same
            model.eval()  # sharded: every process joins the forward (it gathers the blocks); process 0 records
            metrics = evaluate(model if sharded else whole, val, cfg.eval_lambdas)
            if accelerator.is_main_process:
                log_epoch(state, bar, epoch, step, parts["loss"].item(), metrics)
        if end_of_epoch or step % cfg.checkpoint_every == 0 or step == total:
            state.update(step=step, train_seconds=time.perf_counter() - t_start)
            moments = gather_checkpoint(model, optimizer, memory) if sharded else None
            if accelerator.is_main_process:
                save_checkpoint(ckpt, whole, flat_moments(optimizer) if moments is None else moments, state)
        if stop_after is not None and step >= stop_after:
            break
    bar.close()
    if sharded:
        unshard_into(model, memory)
    state.update(step=step, train_seconds=time.perf_counter() - t_start,
                 tokens_per_s=step * cfg.batch_size / max(time.perf_counter() - t_start, 1e-9),
                 processes=accelerator.num_processes)
    if accelerator.is_main_process:
        write_json(out_dir / "train_state.json", {k: v for k, v in state.items()})
    accelerator.wait_for_everyone()
    return state


def log_epoch(state: dict, bar, epoch: int, step: int, loss: float, metrics: dict) -> None:
    """Append an epoch's evaluation to the history and print it."""
    state["history"].append({"epoch": epoch + 1, "step": step, "loss": loss, **metrics})
    bar.write(f"epoch {epoch + 1}: memory PPL {metrics['memory_ppl']:.3f}, joint PPL "
              f"{metrics['joint_ppl']:.3f} at lambda={metrics['best_lambda']} "
              f"(backbone {metrics['backbone_ppl']:.3f})")


def rank_rows(idx: np.ndarray, rank: int, world: int) -> tuple[np.ndarray, float]:
    """This process's rows of a batch (every ``world``-th) and its loss weight ``world · n_rank / n_batch``.

    With DDP averaging the gradients of the ``world`` processes, the weights make the update equal to the
    gradient of the mean loss over the whole batch, whatever its size. A process left without a row (a
    batch smaller than ``world``) runs one row at weight 0, so that every process joins the gradient sum.
    """
    mine = idx[rank::world]
    if len(mine) == 0:
        return idx[:1], 0.0
    return mine, world * len(mine) / len(idx)
