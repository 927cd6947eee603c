"""Markdown cells, tables and figures of the QA report's intervals (:mod:`studies.qa.intervals`).

A score is written ``mean ± standard error``; a difference ``Δ [low, high]`` with its verdict. Where a method
file kept no per-item scores the cell shows the point estimate and "no interval". The figures are
:func:`mlpmem.evaluation.compare.plot_deltas`: per task each method's paired Δ vs the backbone as a point with
its 95 % interval as error bars (only the comparisons that have intervals are drawn).
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.evaluation.compare import plot_deltas
from mlpmem.evaluation.stats import Interval
from mlpmem.reporting.tables import DASH, fixed, markdown_table
from studies.qa.intervals import METRIC_LABELS, NO_INTERVAL, Comparison


def score_cell(point: float | None, interval: Interval | None) -> str:
    """``8.9 ± 1.6``, ``8.9 (no interval)`` or ``—``."""
    if interval is not None:
        return f"{interval.estimate:.1f} ± {interval.stderr:.1f}"
    return DASH if point is None else f"{fixed(point)} ({NO_INTERVAL})"


def delta_cell(c: Comparison) -> str:
    """``+8.9 [+4.1, +13.9]``, ``+8.9 (no interval)`` or ``—``."""
    if c.delta is not None:
        d = c.delta
        return f"{d.estimate:+.1f} [{d.low:+.1f}, {d.high:+.1f}]"
    return DASH if c.point_delta is None else f"{c.point_delta:+.1f} ({NO_INTERVAL})"


def comparison_table(by_method: dict[str, list[Comparison]], labels: dict[str, str],
                     task_header: str = "task") -> str:
    """One row per method, task and metric: n paired items, the backbone's and the method's score on them
    (± standard error), the paired Δ with its 95 % interval, and the verdict."""
    rows = [[labels.get(method, method), c.task, METRIC_LABELS[c.metric], DASH if c.delta is None else c.delta.n,
             score_cell(c.base_point, c.base), score_cell(c.method_point, c.method), delta_cell(c), c.verdict]
            for method, comparisons in by_method.items() for c in comparisons]
    header = ["method", task_header, "metric", "n paired", "backbone", "method", "Δ vs backbone [95 % CI]", "verdict"]
    return markdown_table(header, rows)


def contrast_table(contrasts: list[tuple[str, str, Comparison]], labels: dict[str, str]) -> str:
    """One row per pair, benchmark and metric: the method against another (not the backbone), paired."""
    rows = []
    for m, r, c in contrasts:
        rows.append([labels.get(m, m), labels.get(r, r), c.task, METRIC_LABELS[c.metric],
                     DASH if c.delta is None else c.delta.n, score_cell(c.base_point, c.base),
                     score_cell(c.method_point, c.method), delta_cell(c), c.verdict.replace("base", labels.get(r, r))])
    header = ["method", "reference", "benchmark", "metric", "n paired", "reference score", "method score",
              "Δ [95 % CI]", "verdict"]
    return markdown_table(header, rows)


def delta_figure(by_method: dict[str, list[Comparison]], labels: dict[str, str], path: Path,
                 metrics: tuple[str, ...] | None = None) -> Path | None:
    """The Δ-vs-backbone plot of the comparisons (of ``metrics``) that have intervals; ``None`` if none has."""
    rows = {}
    for method, comparisons in by_method.items():
        drawn = [c.row() for c in comparisons if c.delta is not None and (metrics is None or c.metric in metrics)]
        if drawn:
            rows[labels.get(method, method)] = drawn
    if not rows:
        return None
    return plot_deltas(rows, path, base_name="backbone")


def figure_line(path: Path | None, title: str) -> str:
    """The Markdown image of a figure, or the reason there is none."""
    if path is None:
        return f"(no {title} figure: no method file kept per-item scores)"
    return f"![{title}]({path.name})"
