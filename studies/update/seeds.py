"""Part of ``python -m studies update-study``: how much one update and one retraining move with their seeds.

At the sizes a CPU affords, the added entities' QA sits a few points above chance, and one fine-tuning or one
training from scratch is one draw: another seed moves it by as much as update recipes differ. Two settings put
the spread into the report, so that recipes are compared on means, not on single draws:

- ``update_seeds: [0, 1, 2]`` runs every update variant once per maintenance seed (``<name>-seed<s>``, the
  variant's overrides then ``seed=<s>``), and the report gives each recipe's mean and standard deviation over them;
- ``retrain_seeds: [1, 2]`` trains the retrained memory again at each seed (added to the run's ``train.seed``), on a
  copy of the retrained run's datastore and teacher (both deterministic: only the memory's training is repeated,
  ``<out>/runs/retrained-seed<s>``), scores the arriving entities, and gives every update's added entities against
  the mean of all the retrained memories (the study's own, seed 0, and these) beside the row against its own.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import statistics
import time
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.pipeline import run_stage
from mlpmem.pipeline.run import Run

RETRAINED = "retrained"
"""The study's retrained memory among the steps of its scores (seed 0)."""
SEEDED = re.compile(r"^(?P<recipe>.+)-seed(?P<seed>\d+)$")
NOT_COPIED = ("memory", "memory.sha256.json", "train", "learning_curve.png", "results.json", "report.md",
              "lambda.png", "gate", "ablations", "maintenance", "train-bench", "bench-*", ".lock")
"""What a retrained run's copy leaves behind: the memory, its training and everything made from the memory (the
datastore, evaluation keystores, kNN-LM sweep and teacher are copied)."""


def check_seeds(update_seeds: list[int], retrain_seeds: list[int], variants: dict) -> None:
    """One-line errors for seeds that repeat, are negative, or (retraining) are the study's own seed 0, and for
    ``update_seeds`` without variants or variants that already set a seed."""
    for name, seeds in (("update_seeds", update_seeds), ("retrain_seeds", retrain_seeds)):
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds) or len(set(seeds)) < len(seeds):
            raise ConfigError(f"update-study {name} must be distinct integers >= 0, got {seeds}")
    if 0 in retrain_seeds:
        raise ConfigError("update-study retrain_seeds: 0 is the study's own retrained memory; give other seeds")
    if update_seeds and not variants:
        raise ConfigError("update-study update_seeds repeats the update_variants: give at least one variant")
    for name, overrides in variants.items() if update_seeds else ():
        if any(o.startswith("seed=") for o in overrides):
            raise ConfigError(f"update-study update_variants {name!r} sets a seed and update_seeds gives it seeds: "
                              "drop one of them")


def expand(variants: dict[str, list[str]], seeds: list[int]) -> dict[str, list[str]]:
    """Every variant once per seed (``<name>-seed<s>``, its overrides then ``seed=<s>``); unchanged without seeds."""
    if not seeds:
        return dict(variants)
    return {f"{name}-seed{s}": [*overrides, f"seed={s}"] for name, overrides in variants.items() for s in seeds}


def retrained_step(seed: int) -> str:
    """The key of a retrained memory's scores among the study's steps, and its folder under ``<out>/runs``."""
    return RETRAINED if seed == 0 else f"{RETRAINED}-seed{seed}"


def retrain_at_seeds(scratch: Run, seeds: list[int], out: Path, open_copy) -> dict[int, tuple[Run, float]]:
    """The memory of ``scratch`` (a finished retrained run, read, not changed) trained again at every seed of
    ``seeds`` on a copy of its datastore and teacher; ``{seed: (run, seconds of the training)}``.
    ``open_copy(folder, seed) -> run`` opens a copy with the run's ``train.seed`` plus ``seed``."""
    runs = {}
    for seed in seeds:
        folder = out / "runs" / retrained_step(seed)
        if folder.exists():
            raise ConfigError(f"{folder} already exists: a study never writes over a finished one")
        shutil.copytree(scratch.dir, folder, ignore=lambda at, names: _not_copied(scratch.dir, at, names))
        run = open_copy(folder, seed)
        t0 = time.perf_counter()
        run_stage(run, "train", rebuild=True)
        runs[seed] = (run, time.perf_counter() - t0)
    return runs


def _not_copied(root: Path, at: str, names: list[str]) -> set[str]:
    """The names of :data:`NOT_COPIED` at the run folder's top (``knnlm/results.json`` is kept)."""
    if Path(at) != Path(root):
        return set()
    return {n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in NOT_COPIED)}


def _mean_sd(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "n": len(values)}


def retrained_spread(scores: dict) -> dict | None:
    """The arriving entities' QA of every retrained memory (by step) with their mean and standard deviation; None
    with the study's own retrained memory alone."""
    steps = [k for k in scores if k == RETRAINED or k.startswith(f"{RETRAINED}-seed")]
    if len(steps) < 2:
        return None
    values = {k: scores[k]["arriving"]["choice"] for k in steps}
    return {"arriving": values, **_mean_sd(list(values.values()))}


def recipe_means(rows: dict[str, dict]) -> dict[str, dict]:
    """Per recipe whose variants differ only by seed (``<recipe>-seed<s>``, two or more): the mean and standard
    deviation over its seeds of each update row (``added``, ``added_vs_retrained_mean`` when there, ``old``,
    ``cost``) and the seeds it is made of."""
    by_recipe: dict[str, list[tuple[int, dict]]] = {}
    for name, row in rows.items():
        match = SEEDED.match(name)
        if match:
            by_recipe.setdefault(match["recipe"], []).append((int(match["seed"]), row))
    out = {}
    for recipe, seeded in by_recipe.items():
        if len(seeded) < 2:
            continue
        keys = [k for k in ("added", "added_vs_retrained_mean", "old", "cost")
                if all(row.get(k) is not None for _, row in seeded)]
        out[recipe] = {"seeds": sorted(s for s, _ in seeded),
                       **{k: _mean_sd([row[k] for _, row in seeded]) for k in keys}}
    return out
