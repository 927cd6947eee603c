"""The command ``python -m studies bench breakeven CONFIG --sizes A,B,C``: every size measured (or resumed), then
the break-even, the growth laws, the projection, ``report.md``, ``results.json`` and ``breakeven.png``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.utils.runtime import set_threads
from studies.bench.breakeven.config import BreakEvenConfig
from studies.bench.breakeven.costs import shape_of, size_entry
from studies.bench.breakeven.growth import growth_laws
from studies.bench.breakeven.online import index_record, storage, timed_online
from studies.bench.breakeven.projection import project
from studies.bench.breakeven.report import plot, report
from studies.bench.breakeven.search_scale import search_scale
from studies.bench.breakeven.stages import SizeRun, finetune_costs, size_run, timed_pipeline
from studies.bench.common import threads, write_outputs


def size_runs(cfg: BreakEvenConfig, base: PipelineConfig, progress: bool) -> list[SizeRun]:
    """Every size's run (smallest first, one backbone loaded for all), each training split tokenized and capped;
    two sizes holding the same tokens (both the whole split) are refused before anything is measured."""
    runs, seen, backbone = [], {}, None
    for tokens in sorted(cfg.sizes):
        size = size_run(base, tokens, Path(cfg.out_dir), progress, backbone)
        held = split_tokens(size.run, "train").num_tokens
        if held in seen:
            raise ConfigError(f"sizes {seen[held]} and {tokens} both hold the whole training split ({held:,} "
                              "tokens): choose sizes below it")
        seen[held], backbone = tokens, size.run.backbone
        runs.append(size)
    return runs


def measure_size(cfg: BreakEvenConfig, size: SizeRun, progress: bool) -> tuple[dict, dict]:
    """One size end to end: its run's stages, the fine-tuned baselines, ``bench infer``; its entry and ``bench
    infer``'s record of the machine."""
    timed_pipeline(size)
    finetune = finetune_costs(size, cfg.finetune, progress)
    online = timed_online(cfg, size, progress)
    index = index_record(size.folder / "knn-index") if "knnlm" in online["methods"] else None
    shape = shape_of(cfg.prompt_tokens, cfg.new_tokens)
    entry = size_entry(size, shape, cfg.new_tokens, online, storage(size, online, index, finetune), index,
                       cfg.pq_bytes)
    return entry, online["machine"]


@contextlib.contextmanager
def thread_cap(n: int | None):
    """``n`` threads for this command, the pipeline's stages too (they read ``MLPMEM_THREADS``); restored after."""
    before = os.environ.get("MLPMEM_THREADS")
    if n:
        os.environ["MLPMEM_THREADS"] = str(n)
    try:
        threads(n)
        yield
    finally:
        if before is None:
            os.environ.pop("MLPMEM_THREADS", None)
        else:
            os.environ["MLPMEM_THREADS"] = before
        set_threads()


def run_breakeven(config_path: str, cfg: BreakEvenConfig, progress: bool = True) -> dict:
    """Measure every size (smallest first), then compare; the results dict."""
    base = PipelineConfig.from_yaml(config_path, cfg.overrides)
    entries, machine = [], None
    with thread_cap(cfg.threads):
        runs = size_runs(cfg, base, progress)
        for size in runs:
            entry, machine = measure_size(cfg, size, progress)
            entries.append(entry)
        searched = search_scale(cfg, runs[-1], progress)
    shape = shape_of(cfg.prompt_tokens, cfg.new_tokens)
    return {"config": json.loads(json.dumps(asdict(cfg))), "run_config": config_path, "request": asdict(shape),
            "machine": machine, "sizes": entries, "growth": growth_laws(entries), "search_scale": searched,
            "projection": project(max(entries, key=lambda e: e["tokens"]), shape, searched[-1] if searched else None)}


def main(config_path: str, cfg: BreakEvenConfig, progress: bool = True) -> dict:
    """Run the comparison and write ``results.json``, ``report.md`` and ``breakeven.png`` (``docs_dir`` or
    ``out_dir``)."""
    t0 = time.perf_counter()
    results = run_breakeven(config_path, cfg, progress)
    results["seconds_total"] = time.perf_counter() - t0
    write_outputs(cfg.docs_dir or cfg.out_dir, results, report(results), plot, "breakeven.png")
    return results


def cmd_breakeven(args: argparse.Namespace) -> None:
    names = ("sizes", "out_dir", "docs_dir", "prompt_tokens", "new_tokens", "serving_batch", "repeats", "warmup",
             "rag_retriever", "ivfpq_min_keys", "pq_bytes", "nprobe", "search_keys", "threads")
    values = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if args.finetune is not None:
        values["finetune"] = [n for n in args.finetune if n and n != "none"]
    main(args.config, BreakEvenConfig(**values, overrides=args.set), progress=not args.quiet)
