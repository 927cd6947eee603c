"""What the loop reads and scores: the training rows, their seeded order and split across processes, and the
validation evaluation (memory-only and mixed perplexity)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mlpmem.compute import model_device
from mlpmem.distil import averaged_probs
from mlpmem.inference.perplexity import best_lambda, lambda_curve, perplexity, tokens_for_mass
from mlpmem.memory.model import MLPMemory
from mlpmem.memory.vocab import covered_perplexity, to_head_ids

SHARPNESS_ROWS = 1024
"""Validation rows on which the memory's sharpness is measured at each evaluation."""


@dataclass
class TrainData:
    """Keys, next tokens and sparse teacher rows of every datastore position (memory-mapped or in RAM)."""

    keys: np.ndarray  # (N, d) fp16
    targets: np.ndarray  # (N,) int32
    teacher_ids: np.ndarray  # (N, K) int32
    teacher_probs: np.ndarray  # (N, K) fp16
    teacher_residual: np.ndarray  # (N,) fp32
    head_index: np.ndarray | None = None
    """(V,) full token id -> row of a corpus head (:func:`mlpmem.memory.vocab.index_of`); None: a full head."""
    plan: EpochRows | None = None
    """Which rows an epoch visits; None: every row."""

    @property
    def rows_per_epoch(self) -> int:
        return len(self.targets) if self.plan is None else self.plan.per_epoch(len(self.targets))

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """The rows of ``epoch`` in their seeded order (a function of (seed, epoch) alone: a resumed run repeats it)."""
        if self.plan is None:
            return epoch_order(len(self.targets), seed, epoch)
        return self.plan.order(len(self.targets), seed, epoch)

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        """The rows ``idx`` as tensors; token ids are head rows (the same ids under a full head)."""
        idx = np.sort(idx)  # sorted reads are sequential in the memory map; order within a batch is irrelevant
        targets, teacher_ids = self.targets[idx].astype(np.int64), self.teacher_ids[idx].astype(np.int64)
        if self.head_index is not None:
            targets = to_head_ids(targets, self.head_index, "the datastore's next tokens")
            teacher_ids = to_head_ids(teacher_ids, self.head_index, "the teacher")
        return {
            "keys": torch.from_numpy(self.keys[idx].astype(np.float32)),
            "targets": torch.from_numpy(targets),
            "teacher_ids": torch.from_numpy(teacher_ids),
            "teacher_probs": torch.from_numpy(self.teacher_probs[idx].astype(np.float32)),
            "teacher_residual": torch.from_numpy(self.teacher_residual[idx]),
        }


@dataclass
class EvalData:
    """Validation keys, their next tokens and the backbone's log-prob of each (for the mixed perplexity)."""

    keys: np.ndarray  # (n, d)
    targets: np.ndarray  # (n,)
    lm_logprob: np.ndarray  # (n,)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the ``n`` rows in ``epoch``: a function of (seed, epoch) alone, so a resumed run repeats it."""
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass(frozen=True)
class EpochRows:
    """Rows ``[0, fixed)`` every epoch, plus ``draw`` rows of the rest (the pool) drawn afresh each epoch.

    The draws walk through seeded permutations of the pool, one after another, so that no pool row comes back
    before every pool row has been drawn: over the epochs a small replay share per epoch still covers the pool
    (an epoch that straddles two permutations may hold a row twice).
    """

    fixed: int
    draw: int

    def __post_init__(self) -> None:
        if self.fixed < 0 or self.draw < 0:
            raise ValueError(f"EpochRows needs fixed >= 0 and draw >= 0, got {self.fixed}, {self.draw}")

    def per_epoch(self, n: int) -> int:
        return self.fixed + min(self.draw, n - self.fixed)

    def order(self, n: int, seed: int, epoch: int) -> np.ndarray:
        pool, draw = n - self.fixed, self.per_epoch(n) - self.fixed
        drawn = np.zeros(0, np.int64)
        if draw:
            first, last = epoch * draw // pool, ((epoch + 1) * draw - 1) // pool  # the permutations it spans
            walk = np.concatenate([np.random.default_rng([seed, 1, c]).permutation(pool)
                                   for c in range(first, last + 1)])
            start = epoch * draw - first * pool
            drawn = self.fixed + walk[start:start + draw]
        rows = np.concatenate([np.arange(self.fixed), drawn])
        return rows[np.random.default_rng([seed, epoch]).permutation(len(rows))]


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


@torch.no_grad()
def memory_logprobs(memory: MLPMemory, keys: np.ndarray, targets: np.ndarray, batch: int = 1024) -> np.ndarray:
    """log p_mem(target) for every row, in batches (only the target's log-prob is kept), computed over the head's
    own rows: -inf for a target outside a corpus head."""
    out = np.empty(len(keys), np.float64)
    device = model_device(memory)
    for b in range(0, len(keys), batch):
        x = torch.from_numpy(np.asarray(keys[b : b + batch], np.float32)).to(device)
        logits = memory(x, full_vocab=False)  # (B, V')
        tgt = torch.from_numpy(np.asarray(targets[b : b + batch], np.int64)).to(device)
        rows, covered = tgt, torch.ones_like(tgt, dtype=torch.bool)
        if memory.vocab_ids is not None:  # the head row of each target, if it has one
            rows = torch.searchsorted(memory.vocab_ids, tgt).clamp(max=len(memory.vocab_ids) - 1)
            covered = memory.vocab_ids[rows] == tgt
        lp = logits.gather(1, rows[:, None])[:, 0] - torch.logsumexp(logits, 1)  # (B,)
        out[b : b + batch] = torch.where(covered, lp, float("-inf")).double().cpu().numpy()
    return out


def memory_mass80(memory: MLPMemory, keys: np.ndarray, rows: int = SHARPNESS_ROWS) -> float:
    """Mean number of tokens holding 80 % of p_mem over the first ``rows`` keys (in the head's own rows: the
    tokens outside a corpus head hold no mass)."""
    return averaged_mass80([memory], keys, rows)


def averaged_mass80(memories: list[MLPMemory], keys: np.ndarray, rows: int = SHARPNESS_ROWS) -> float:
    """:func:`memory_mass80` of the memories' distributions averaged (they share one head's rows)."""
    return tokens_for_mass(averaged_probs(memories, keys[:rows]), 0.8).double().mean().item()


def evaluate(memory: MLPMemory, data: EvalData, lambdas: list[float]) -> dict:
    """Memory-only perplexity (over the targets its head covers, with that coverage) and the joint perplexity at
    each λ (mixed after softmax)."""
    lp_mem = memory_logprobs(memory, data.keys, data.targets)
    return scores(lp_mem, data, lambdas, memory_mass80(memory, data.keys))


def scores(lp_mem: np.ndarray, data: EvalData, lambdas: list[float], mass80: float) -> dict:
    """An evaluation's scores from the memory's log-prob of each target ``lp_mem`` (n,) and its sharpness."""
    joint = lambda_curve(data.lm_logprob, lp_mem, lambdas)
    best = best_lambda(joint)
    memory_ppl, coverage = covered_perplexity(lp_mem)
    return {"memory_ppl": memory_ppl, "memory_coverage": coverage, "memory_mass80": mass80,
            "backbone_ppl": perplexity(data.lm_logprob),
            "joint_ppl": joint[best], "best_lambda": best, "ppl_by_lambda": {str(k): v for k, v in joint.items()}}
