"""Shared pieces of the speed benchmarks: robust statistics, threads, parameter bytes, result files.

Benchmarks time every method side by side in one process, interleaved repetition by repetition (so a
load spike on a shared machine hits all methods alike), after warm-up repetitions that are discarded;
they report the median and the spread (min-max of the kept repetitions) and ratios of medians.
Their Markdown tables are :func:`mlpmem.reporting.tables.markdown_table`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.utils.runtime import set_threads


def summarize(samples: list[float]) -> dict:
    """Median, min, max and count of repeated measurements."""
    if not samples:
        raise ConfigError("no measurement to summarize")
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def threads(n: int | None) -> int:
    """Set torch (and FAISS) threads to ``n`` or to the cores available to this process."""
    return set_threads(n or len(os.sched_getaffinity(0)))


def unique_param_bytes(module, exclude=()) -> int:
    """Bytes of the distinct parameters of ``module`` (shared tensors once), minus those in ``exclude``."""
    seen = {p.data_ptr() for m in exclude for p in m.parameters()}
    total = 0
    for p in module.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (ending in a newline) to ``path``, creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path


def write_outputs(folder: str | Path, results: dict, text: str, plot, figure: str) -> None:
    """A benchmark's ``results.json``, ``report.md`` (``text``) and its figure (``plot(results, path)``) in
    ``folder``; the report and where the files are, printed."""
    folder = Path(folder)
    write_text(folder / "results.json", json.dumps(results, indent=1, default=str))
    write_text(folder / "report.md", text)
    plot(results, folder / figure)
    print(text)
    print(f"results: {folder / 'results.json'}, figure: {folder / figure}")


def interleave(fns: dict, warmup: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds (this process, all its threads) of each function over ``warmup + repeats`` rounds in
    rotating order, warm-up rounds dropped. CPU time barely counts the time other jobs of a shared machine take."""
    names = list(fns)
    seconds = {n: {"wall": [], "cpu": []} for n in fns}
    for rep in range(warmup + repeats):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            fns[name]()
            if rep >= warmup:
                seconds[name]["wall"].append(time.perf_counter() - wall)
                seconds[name]["cpu"].append(time.process_time() - cpu)
    return seconds
