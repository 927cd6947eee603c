"""The ``seeds`` ablation study's extra row and note: how much a memory's scores move with its seed alone, and what
the seeds' memories give when their distributions are averaged.

The seeds' spread is the noise floor against which every other study's differences are read (two variants closer
than the spread are not told apart by one training each). The ensemble row mixes the seeds' memories in probability
space, ``p_ens = (1/N) Σ_i p_i``, and scores it like a variant (memory alone over the covered targets, memory +
backbone at the best λ of the training grid, sharpness), at N times a memory's size and inference cost.

The ``distil`` study trains one memory, of the run's size, against those seeds' memories averaged (optionally mixed
with the kNN teacher: :mod:`mlpmem.distil`), to keep part of the ensemble's gain at one memory's cost. It needs the
``seeds`` study of the same configuration; each distilled teacher is built once under ``ablations/distil/`` and
shared by the variants that use it. The variant without ``knn_weight`` is the run's own memory (kNN teacher).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from pathlib import Path

import numpy as np
import yaml

from mlpmem.errors import ConfigError
from mlpmem.layout import RunLayout
from mlpmem.memory import MLPMemory
from mlpmem.pipeline.train import stage_train
from mlpmem.training.data import EvalData, averaged_mass80, memory_logprobs, scores
from mlpmem.utils.shards import sha256_file
from studies.distil_teacher import DistilConfig, build_distilled_teacher, check_members, load_members
from studies.variant_runs import config_record, slug, variant_run, with_overrides

DISTIL_VARIANTS = {
    "kNN teacher (the run's)": {},
    "seeds' ensemble, alpha=0.2": {"knn_weight": 0.0, "train.alpha": 0.2},
    "seeds' ensemble, alpha=0.6": {"knn_weight": 0.0, "train.alpha": 0.6},
    "seeds' ensemble + kNN (0.5), alpha=0.2": {"knn_weight": 0.5, "train.alpha": 0.2},
}


def ensemble_logprobs(memories: list[MLPMemory], keys: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log p_ens(target) (n,) of the memories averaged in probability space; -inf where no memory's head covers it."""
    stacked = np.stack([memory_logprobs(m, keys, targets) for m in memories])  # (N, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.logaddexp.reduce(stacked, axis=0) - math.log(len(memories))


def evaluate_ensemble(memories: list[MLPMemory], val: EvalData, lambdas: list[float]) -> dict:
    """Validation scores of the averaged memories, with the keys of a training evaluation (:func:`scores`)."""
    check_members(memories)
    for m in memories:
        m.eval()
    return scores(ensemble_logprobs(memories, val.keys, val.targets), val, lambdas,
                  averaged_mass80(memories, val.keys))


def ensemble_row(run, rows: list[dict], folders: list[Path], val: EvalData) -> dict:
    """The row of the memories saved in ``folders`` (the seeds' rows ``rows``) averaged, scored on ``val``."""
    result = evaluate_ensemble(load_members(folders, run.backbone), val, run.cfg.train.eval_lambdas)
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


def member_folders(run, rows: list[dict]) -> list[Path]:
    """The memory folders of the ``seeds`` study's rows (the run's own memory for the variant it is)."""
    base = run.path("ablations", "seeds")
    return [run.layout.memory if r["main_run"] else RunLayout(base / slug(r["variant"])).memory
            for r in rows if not r.get("ensemble")]


def seed_memories(run) -> list[Path]:
    """The memory folders of the run's finished ``seeds`` study, or a one-line error saying what to run first."""
    path = run.path("ablations", "seeds") / "results.json"
    if not path.is_file():
        raise ConfigError("the distil study trains against the seeds' memories: run "
                          "`python -m studies ablate CONFIG --study seeds` first")
    done = json.loads(path.read_text())
    if done.get("config") != config_record(run.cfg):
        raise ConfigError(f"{path} was written under another configuration of the run: run the seeds study again")
    return member_folders(run, done["rows"])


def train_distilled(run, folder: Path, overrides: dict) -> dict:
    """A memory of the run's recipe (with the ``train.`` / ``memory.`` overrides) trained into ``folder`` against
    the seeds' memories averaged and mixed with the kNN teacher at ``overrides["knn_weight"]``."""
    members = seed_memories(run)
    distil = DistilConfig(knn_weight=overrides["knn_weight"], top_k=run.cfg.teacher.top_k)
    members_sha = hashlib.sha256("".join(sha256_file(f / "model.safetensors") for f in members).encode())
    # one teacher per member set and weight: seeds trained again (another recipe) get a teacher of their own
    teacher = run.path("ablations", "distil", f"teacher-knn{distil.knn_weight:g}-{members_sha.hexdigest()[:8]}")
    build_distilled_teacher(run.layout.datastore, members, teacher, distil, knn_teacher=run.layout.teacher,
                            backbone=run.backbone, progress=run.progress)
    cfg = with_overrides(run.cfg, {k: v for k, v in overrides.items() if "." in k})
    cfg = dataclasses.replace(cfg, run_dir=str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return stage_train(variant_run(run, cfg, folder, {"datastore", "eval"}, teacher=teacher))
