"""One corpus size: its pipeline run timed stage by stage, and the fine-tuned baselines trained on its corpus.

Each size is a full run of the config with the training split capped at that many tokens
(:func:`studies.data_scaling.size_config`, run in ``<out>/runs/train-<N>``). What is measured goes into
``<out>/train-<N>/costs.json`` as soon as it is measured, so a rerun measures only what is missing; a stage that
resumed the work of an interrupted call is timed by its rate on the rows this call built (recorded as
``extrapolated_from_rows``), and one built entirely before falls back to the pipeline's own ``timings.json``.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass
from pathlib import Path

from mlpmem.baselines.methods import MethodOptions, build_method
from mlpmem.errors import ConfigError
from mlpmem.pipeline import built, run_stage
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.utils.distributed import shards_before
from mlpmem.utils.shards import read_json, write_json
from studies.bench.infer.setup import train_documents
from studies.data_scaling import size_config

STAGES = ("datastore", "knnlm", "teacher", "train", "eval")
"""The pipeline's stages in order; the kNN-LM sweep and the evaluation run (they choose k, T and λ) untimed."""
TIMED = {"datastore": "keys_train", "teacher": "teacher", "train": "train"}
"""The stages whose time is an offline cost, and their names in ``costs.json`` (and ``timings.json``)."""


@dataclass
class SizeRun:
    """One size's run and its record (``costs.json``: sections ``offline``, ``finetune``, ``online``)."""

    tokens: int
    folder: Path
    run: Run
    record: dict

    def save(self) -> None:
        write_json(self.folder / "costs.json", self.record)


def _plain(value) -> object:
    return json.loads(json.dumps(value, default=str))


def size_run(base: PipelineConfig, tokens: int, out: Path, progress: bool, backbone: tuple | None = None) -> SizeRun:
    """The run of ``base`` capped at ``tokens`` training tokens, and what earlier calls measured of it."""
    cfg = size_config(base, tokens, out)
    folder = out / f"train-{tokens}"
    path = folder / "costs.json"
    record = read_json(path, "breakeven costs") if path.is_file() else {
        "tokens_cap": tokens, "config": _plain(cfg.to_dict()), "offline": {}, "finetune": {}}
    if record["config"] != _plain(cfg.to_dict()):
        raise ConfigError(f"{path} was measured under another config: give another --out or remove {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    return SizeRun(tokens, folder, Run(cfg, progress=progress, backbone=backbone), record)


def _rows_before(run: Run, stage: str) -> int:
    folder = {"datastore": run.layout.keystore("train"), "teacher": run.layout.teacher}.get(stage)
    return 0 if folder is None else sum(s["rows"] for s in shards_before(folder))


def _by_rate(run: Run, name: str, rows: int, seconds: float, before: int) -> dict:
    """Seconds of a sharded stage over all its ``rows``: measured, or by the rate of the rows built now."""
    done = rows - before
    if done > 0:
        extra = {"extrapolated_from_rows": done} if before else {}
        return {"seconds": seconds * rows / done, "rows": rows, **extra}
    recorded = run.timings().get(name)
    if recorded and not recorded.get("resumed_after") and recorded.get("tokens") == rows:
        return {"seconds": recorded["seconds"], "rows": rows, "from": "timings.json"}
    raise ConfigError(f"the {name} of {run.dir} was built before and timed nowhere: remove {run.dir} to measure it")


def _train_record(run: Run) -> dict:
    state = read_json(run.layout.train / "train_state.json", "training state")
    timing = run.timings().get("train", {})
    epochs = [h.get("epoch") for h in state["history"] if h.get("epoch") is not None]
    return {"seconds": state["train_seconds"], "tokens": timing.get("tokens"), "steps": state["step"],
            "best_step": state["best_step"], "stopped_early": state["stopped_early"],
            "restored_best": state["restored_best"], "epochs": max(epochs) if epochs else None,
            "flops_per_token_counted": timing.get("flops_per_token")}


def _measure(run: Run, stage: str, out, wall: float, before: int) -> dict:
    if stage == "datastore":
        return _by_rate(run, "keys_train", out["train"]["tokens"], out["train"]["seconds"], before)
    if stage == "teacher":
        return _by_rate(run, "teacher", out["rows"], wall, before)
    return _train_record(run)


def timed_pipeline(size: SizeRun) -> dict:
    """Run (or resume) every stage of the size's run; the offline stages' seconds, recorded as they finish."""
    run, offline = size.run, size.record["offline"]
    for stage in STAGES:
        name = TIMED.get(stage)
        if built(run, stage) and (name is None or name in offline):
            continue
        before = _rows_before(run, stage)
        t0 = time.perf_counter()
        out = run_stage(run, stage)
        if name is not None:
            offline[name] = _measure(run, stage, out, time.perf_counter() - t0, before)
            size.save()
    return offline


def finetune_costs(size: SizeRun, names: list[str], progress: bool) -> dict:
    """Train each fine-tuned baseline of ``names`` on the size's corpus once (a copy of the backbone each); their
    training seconds, tokens (× epochs), trainable parameters and the bytes they add at inference."""
    done = size.record["finetune"]
    todo = [n for n in names if n not in done]
    if todo:
        docs = train_documents(size.run.cfg, size.run.backbone[1])
        for name in todo:
            built_method = build_method(name, size.run.dir, size.run.backbone,
                                        MethodOptions(docs=docs, progress=progress))
            stats = built_method.info
            done[name] = {"seconds": stats["train_seconds"], "tokens": stats["tokens"], "steps": stats["steps"],
                          "trainable_parameters": stats["trainable_parameters"],
                          "inference_bytes": built_method.cost["inference_bytes"]}
            size.save()
            del built_method
            gc.collect()
    return {n: done[n] for n in names}
