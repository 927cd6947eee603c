"""The ``seeds`` ablation study's extra row and note: how much a memory's scores move with its seed alone, and what
the seeds' memories give when their distributions are averaged.

The seeds' spread is the noise floor against which every other study's differences are read (two variants closer
than the spread are not told apart by one training each). The ensemble row mixes the seeds' memories in probability
space, ``p_ens = (1/N) Σ_i p_i``, and scores it like a variant (memory alone over the covered targets, memory +
backbone at the best λ of the training grid, sharpness), at N times a memory's size and inference cost.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from mlpmem.errors import ConfigError
from mlpmem.memory import MLPMemory
from mlpmem.training.data import EvalData, averaged_mass80, memory_logprobs, scores


def ensemble_logprobs(memories: list[MLPMemory], keys: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log p_ens(target) (n,) of the memories averaged in probability space; -inf where no memory's head covers it."""
    stacked = np.stack([memory_logprobs(m, keys, targets) for m in memories])  # (N, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.logaddexp.reduce(stacked, axis=0) - math.log(len(memories))


def check_same_head(memories: list[MLPMemory]) -> None:
    """The members' heads score the same tokens (a corpus head's ids, or the full vocabulary), else a ConfigError."""
    ids = [None if m.vocab_ids is None else m.vocab_ids.tolist() for m in memories]
    if any(i != ids[0] for i in ids[1:]):
        raise ConfigError("the seeds' memories score different vocabularies: they cannot be averaged")


def evaluate_ensemble(memories: list[MLPMemory], val: EvalData, lambdas: list[float]) -> dict:
    """Validation scores of the averaged memories, with the keys of a training evaluation (:func:`scores`)."""
    check_same_head(memories)
    for m in memories:
        m.eval()
    return scores(ensemble_logprobs(memories, val.keys, val.targets), val, lambdas,
                  averaged_mass80(memories, val.keys))


def ensemble_row(run, rows: list[dict], folders: list[Path], val: EvalData) -> dict:
    """The row of the memories saved in ``folders`` (the seeds' rows ``rows``) averaged, scored on ``val``."""
    model, tokenizer = run.backbone
    memories = [MLPMemory.from_pretrained(f, backbone_model=model, backbone_tokenizer=tokenizer) for f in folders]
    result = evaluate_ensemble(memories, val, run.cfg.train.eval_lambdas)
    return {"variant": f"ensemble of the {len(rows)} seeds (probabilities averaged)", **result,
            "epochs": "-", "stopped_early": False, "main_run": False, "ensemble": True,
            "train_seconds": sum(r["train_seconds"] for r in rows),
            "trainable_parameters": sum(r["trainable_parameters"] for r in rows)}


def seed_spread(rows: list[dict]) -> str:
    """A sentence with the seeds' spread of validation PPL (memory + backbone, memory alone); empty with < 2."""
    seeds = [r for r in rows if "seed" in r and not r.get("ensemble")]
    if len(seeds) < 2:
        return ""
    parts = []
    for key, label in (("joint_ppl", "memory + backbone"), ("memory_ppl", "memory alone")):
        values = [r[key] for r in seeds]
        mean, std = statistics.mean(values), statistics.stdev(values)
        parts.append(f"{label} {mean:.3f} ± {std:.3f} (standard deviation; range {min(values):.3f}–"
                     f"{max(values):.3f}, {100 * (max(values) - min(values)) / mean:.2f} % of the mean)")
    return (f"Seed spread over {len(seeds)} seeds (same data, recipe and schedule; the seed sets the initialisation "
            f"and the batch order), validation PPL: " + "; ".join(parts) + ".")
