"""Method vs base on the same lm-eval tasks: per task and metric the two scores, the paired difference with
its 95 % interval and a verdict, from the per-item samples lm-eval logs (``--log-samples``).

Input: results JSON files as :func:`mlpmem.evaluation.harness.write_results` writes them (``mlpmem lm-eval
... --log-samples --output FILE``): ``results[task]`` holds the aggregate scores and ``samples[task]`` one
record per item with its per-item metrics (``acc``, ``acc_mutual_info``, ``em``, ``f1``...). Items are
paired by the document's ``id`` field (every task ``python -m studies tasks prepare`` writes has one), else by
lm-eval's ``doc_id``; only items scored in both files count.

Every score and difference is in percent. :func:`compare` returns :class:`Row` objects; :func:`table`
renders them as Markdown, :func:`rows_json` as the machine-readable form the QA report stores
(``delta_vs_base`` with ``ci95``), :func:`plot_deltas` draws per-task Δ with its interval as error bars.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.evaluation.stats import (
    BootstrapConfig,
    Interval,
    average_mean,
    bootstrap_mean,
    paired_average,
    paired_difference,
    verdict,
)
from mlpmem.reporting.plots import pyplot

METRICS = ("acc", "acc_mutual_info", "acc_norm", "exact_match", "em", "f1")
"""Per-item metrics compared, in this order, when a task logs them."""
LABELS = {"acc": "acc", "acc_mutual_info": "PMI", "acc_norm": "acc (norm)", "exact_match": "EM", "em": "EM",
          "f1": "F1"}
AVERAGE = "average"

Items = dict[str, dict[str, float]]
"""item key -> metric -> score (lm-eval's scale: 0..1)."""


@dataclass(frozen=True)
class Row:
    """One task (or the average over tasks) and one metric: base, method, their paired difference."""

    task: str
    metric: str
    base: Interval
    method: Interval
    delta: Interval

    @property
    def verdict(self) -> str:
        return verdict(self.delta)


def load_results(path: str | Path) -> dict:
    """An lm-eval results JSON with per-item samples (one line of error naming what is missing)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such lm-eval results file")
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(results, dict) or not results.get("samples"):
        raise ConfigError(f"{path} holds no per-item samples: run lm-eval with --log-samples")
    return results


def item_key(sample: dict) -> str:
    """An lm-eval sample's item: its document's ``id``, else its position."""
    doc = sample.get("doc")
    return str(doc["id"]) if isinstance(doc, dict) and "id" in doc else f"doc{sample['doc_id']}"


def per_item(results: dict) -> dict[str, Items]:
    """``{task: {item key: {metric: score}}}`` of the numeric per-item metrics of :data:`METRICS`."""
    out: dict[str, Items] = {}
    for task, samples in results["samples"].items():
        items = out.setdefault(task, {})
        for sample in samples:
            scores = {m: float(sample[m]) for m in METRICS if isinstance(sample.get(m), (int, float))}
            if scores:
                items[item_key(sample)] = scores
    return {task: items for task, items in out.items() if items}


def _paired(base: Items, method: Items, metric: str) -> tuple[list[float], list[float]]:
    keys = sorted(k for k in base.keys() & method.keys() if metric in base[k] and metric in method[k])
    return [base[k][metric] for k in keys], [method[k][metric] for k in keys]


def _task_rows(task: str, base: Items, method: Items, cfg: BootstrapConfig) -> list[Row]:
    rows = []
    for metric in METRICS:
        a, b = _paired(base, method, metric)
        if a:
            rows.append(Row(task, metric, bootstrap_mean(a, cfg).scaled(100), bootstrap_mean(b, cfg).scaled(100),
                            paired_difference(a, b, cfg).scaled(100)))
    return rows


def _average_rows(pairs: dict[str, list[tuple[list[float], list[float]]]], cfg: BootstrapConfig) -> list[Row]:
    return [Row(AVERAGE, metric, average_mean([a for a, _ in ps], cfg).scaled(100),
                average_mean([b for _, b in ps], cfg).scaled(100), paired_average(ps, cfg).scaled(100))
            for metric, ps in pairs.items() if len(ps) > 1]


def compare(base: dict, method: dict, tasks: list[str] | None = None,
            cfg: BootstrapConfig | None = None) -> list[Row]:
    """Rows of ``method`` vs ``base`` (two lm-eval results dicts with samples) on ``tasks`` (default: every
    task both hold), then one average row per metric that two or more tasks share."""
    cfg = cfg or BootstrapConfig()
    base_items, method_items = per_item(base), per_item(method)
    shared = [t for t in base_items if t in method_items]
    tasks = tasks or shared
    missing = [t for t in tasks if t not in shared]
    if missing or not tasks:
        raise ConfigError(f"no per-item samples of task(s) {', '.join(missing) or '(none shared)'} in both files")
    rows: list[Row] = []
    pairs: dict[str, list] = {}
    for task in tasks:
        if not any(base_items[task].keys() & method_items[task].keys()):
            raise ConfigError(f"task {task}: base and method scored no item in common")
        task_rows = _task_rows(task, base_items[task], method_items[task], cfg)
        rows += task_rows
        for row in task_rows:
            pairs.setdefault(row.metric, []).append(_paired(base_items[task], method_items[task], row.metric))
    return rows + _average_rows(pairs, cfg)


def _cell(interval: Interval) -> str:
    return f"{interval.estimate:.1f} ± {interval.stderr:.1f}"


def table(rows_by_method: dict[str, list[Row]], base_name: str = "base") -> str:
    """Markdown: per method, task and metric the base and method scores (± standard error), Δ with its
    interval and the verdict."""
    lines = [f"| method | task | metric | n | {base_name} | method | Δ vs {base_name} [95 % CI] | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in rows_by_method.items():
        for r in rows:
            d = r.delta
            lines.append(f"| {name} | {r.task} | {LABELS[r.metric]} | {d.n} | {_cell(r.base)} | {_cell(r.method)} | "
                         f"{d.estimate:+.1f} [{d.low:+.1f}, {d.high:+.1f}] | {r.verdict} |")
    return "\n".join(lines)


def rows_json(rows_by_method: dict[str, list[Row]]) -> dict:
    """``{method: {task: {metric: {base, method, delta_vs_base: {estimate, stderr, ci95, n}, verdict}}}}``."""
    out: dict = {}
    for name, rows in rows_by_method.items():
        for r in rows:
            out.setdefault(name, {}).setdefault(r.task, {})[r.metric] = {
                "n_items": r.delta.n, "base": r.base.as_dict(), "method": r.method.as_dict(),
                "delta_vs_base": r.delta.as_dict(), "verdict": r.verdict}
    return out


def _label(task: str) -> str:
    """A short axis label: ``mlpmem_bb_fact_checker__fever`` -> ``fact_checker/fever``."""
    return task.removeprefix("mlpmem_bb_").removeprefix("mlpmem_").replace("__", "/")


def plot_deltas(rows_by_method: dict[str, list[Row]], path: str | Path, base_name: str = "base") -> Path:
    """One panel per metric: per task each method's Δ vs base (points) with its 95 % interval (error bars)."""
    plt = pyplot()
    metrics = [m for m in METRICS if any(r.metric == m for rows in rows_by_method.values() for r in rows)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4.5), squeeze=False)
    width = 0.8 / max(1, len(rows_by_method))
    for ax, metric in zip(axes[0], metrics):
        tasks = list(dict.fromkeys(r.task for rows in rows_by_method.values() for r in rows if r.metric == metric))
        for k, (name, rows) in enumerate(rows_by_method.items()):
            got = {r.task: r.delta for r in rows if r.metric == metric}
            xs = [i - 0.4 + width * (k + 0.5) for i, t in enumerate(tasks) if t in got]
            ds = [got[t] for t in tasks if t in got]
            ax.errorbar(xs, [d.estimate for d in ds], capsize=3, fmt="o", label=name,
                        yerr=[[d.estimate - d.low for d in ds], [d.high - d.estimate for d in ds]])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(tasks)), [_label(t) for t in tasks], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel(f"Δ {LABELS[metric]} vs {base_name} (points)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
