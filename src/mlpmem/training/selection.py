"""Stopping at the best point of a run: when to evaluate, which evaluation is the best, when to stop early.

The loop evaluates on validation at every epoch end and, with ``train.eval_every``, every that fraction of an
epoch. Each evaluation either lowers the best joint validation perplexity (its weights are then saved to
``best/``) or adds one to the count of evaluations since the best; ``train.patience`` such evaluations in a
row stop the run. These counters live in the trainer state, so a checkpoint carries them and a resumed run
stops where an uninterrupted one does.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory.io import WEIGHTS_NAME
from mlpmem.memory.model import MLPMemory
from mlpmem.training.checkpoint import TrainState
from mlpmem.training.config import TrainConfig

BEST = "best"
"""The folder (under the training folder) holding the weights of the best evaluation."""


def kept_evaluation(state: dict) -> dict | None:
    """The evaluation of the weights a training ended with (an entry of ``state["history"]``): the best one when
    it restored them, else the last; None for a training without evaluations."""
    history = state.get("history") or []
    if not history:
        return None
    step = state["best_step"] if state.get("restored_best") else history[-1]["step"]
    return next(h for h in history if h["step"] == step)


SELECTION = ("best_step", "best_joint_ppl", "evals_since_best", "stopped")
"""The selection counters of a :class:`~mlpmem.training.checkpoint.TrainState`, the same on every process."""


def eval_interval(cfg: TrainConfig, steps_per_epoch: int, total: int) -> int | None:
    """Steps between the evaluations that ``train.eval_every`` asks for (None: epoch ends only)."""
    if cfg.eval_every is None:
        return None
    interval = max(1, math.floor(cfg.eval_every * steps_per_epoch + 0.5))  # halves round up
    if interval > total:
        raise ConfigError(f"train.eval_every={cfg.eval_every} asks for an evaluation every {interval} steps, "
                          f"longer than the whole run ({total} steps)")
    return interval


def is_eval_step(step: int, steps_per_epoch: int, interval: int | None) -> bool:
    """Whether the loop evaluates after ``step`` steps: at an epoch end or every ``interval`` steps of an epoch
    (counted from the epoch's start, so that no evaluation falls just after an epoch end's)."""
    in_epoch = step % steps_per_epoch
    return in_epoch == 0 or (interval is not None and in_epoch % interval == 0)


def tokens_seen(step: int, steps_per_epoch: int, batch_size: int, rows: int) -> int:
    """Training positions visited after ``step`` steps (the last batch of an epoch may be short)."""
    epoch, in_epoch = divmod(step, steps_per_epoch)
    return epoch * rows + min(in_epoch * batch_size, rows)


def record_evaluation(state: TrainState, step: int, joint_ppl: float, patience: int | None) -> bool:
    """Update the best and patience counters of ``state`` with an evaluation; True if it is the new best.

    A NaN perplexity never improves; ``state.stopped`` turns True after ``patience`` evaluations in a row
    without improvement."""
    best = state.best_joint_ppl
    improved = not math.isnan(joint_ppl) and (best is None or joint_ppl < best)
    if improved:
        state.best_step, state.best_joint_ppl, state.evals_since_best = step, joint_ppl, 0
    else:
        state.evals_since_best += 1
        state.stopped = patience is not None and state.evals_since_best >= patience
    return improved


def restore_best(memory: MLPMemory, folder: Path) -> None:
    """Load the weights saved by ``save_pretrained`` in ``folder`` into ``memory`` (a tied head is not stored:
    it stays the backbone's)."""
    weights = load_file(str(Path(folder) / WEIGHTS_NAME))
    expected = {k for k in memory.state_dict() if not (memory.config.tie_head and k == "head.weight")}
    if set(weights) != expected:
        raise CorruptArtifact(f"best weights {folder} do not hold this memory's tensors")
    with torch.no_grad():
        memory.load_state_dict(weights, strict=False)
