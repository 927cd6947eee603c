"""Shared pieces of the speed benchmarks: robust statistics, Markdown tables, run artifacts read-only.

Benchmarks time every method side by side in one process, interleaved repetition by repetition (so a
load spike on a shared machine hits all methods alike), after warm-up repetitions that are discarded;
they report the median and the spread (min-max of the kept repetitions) and ratios of medians.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mlpmem.errors import ConfigError


def summarize(samples: list[float]) -> dict:
    """Median, min, max and count of repeated measurements."""
    if not samples:
        raise ConfigError("no measurement to summarize")
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


class Stopwatch:
    """Collects named measurements; ``with sw.time(name):`` appends the elapsed seconds."""

    def __init__(self):
        self.samples: dict[str, list[float]] = {}

    def add(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)

    @contextmanager
    def time(self, name: str):
        t0 = time.perf_counter()
        yield
        self.add(name, time.perf_counter() - t0)

    def summary(self) -> dict[str, dict]:
        return {name: summarize(values) for name, values in self.samples.items()}


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table; floats are printed with 3 significant digits (or as given if str)."""

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def threads(n: int | None) -> int:
    """Set torch (and FAISS) threads to ``n`` or to the cores available to this process."""
    from mlpmem.utils.runtime import set_threads

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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)
