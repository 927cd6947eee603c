"""The QA report's statistics: every score with its bootstrap standard error, every method-vs-backbone difference
paired over the same items with its 95 % interval, from the per-item scores of the method files.

A score is the mean of per-item scores; :func:`score_interval` bootstraps it (:mod:`mlpmem.evaluation.stats`,
seeded by the suite's ``bootstrap`` config). Two methods are compared on the items **both** scored, matched
by id (:func:`paired_items`): the bootstrap resamples those items once for both, so questions both get right
or both get wrong add no variance. A difference is judged by its interval: ``"above"`` / ``"below"`` when
the interval excludes 0, else ``"not distinguishable from base"`` (:func:`mlpmem.evaluation.stats.verdict`).
A method file without per-item scores (written before they were kept) keeps its point estimate and gets
:data:`NO_INTERVAL` instead of an interval or a verdict.

Everything is in percent. :func:`qa_comparisons` and :func:`no_regression_comparisons` build the
:class:`Comparison` rows of the report's tables; :func:`intervals_json` is their machine-readable form (the
``intervals`` of the docs' ``results.json``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mlpmem.evaluation.compare import Row
from mlpmem.evaluation.stats import BootstrapConfig, Interval, average_mean, bootstrap_mean, paired_difference, verdict
from studies.qa.per_item import item_scores

NO_INTERVAL = "no interval"
BASE = "backbone"
SPLITS = ("test", "held_out")
QA_METRICS = ("em", "f1")
CHOICE_METRICS = ("acc_ll", "acc_pmi")
JSON_NAMES = {"em": "em", "f1": "f1", "acc_ll": "acc", "acc_pmi": "pmi"}
"""Metric names in ``results.json``'s intervals (the issue's ``acc`` / ``pmi`` for multiple choice)."""
METRIC_LABELS = {"em": "EM", "f1": "F1", "acc_ll": "acc (LL)", "acc_pmi": "acc (PMI)"}
COMPARE_METRICS = {"em": "em", "f1": "f1", "acc_ll": "acc", "acc_pmi": "acc_mutual_info"}
"""The same metrics under :mod:`mlpmem.evaluation.compare`'s names (its labels and plot panels)."""
CONTRASTS = (("memory-gate", "memory"), ("memory", "knnlm"), ("memory-gate", "knnlm"), ("memory", "rag-dense"),
             ("memory", "rag-bm25"), ("memory", "cpt"), ("memory", "lora"))
"""``(method, reference)`` pairs the report compares head to head besides each against the backbone: the gate
against the fixed λ, each way of mixing the memory against kNN-LM on the same datastore, and the memory against
each other way of giving the backbone the same corpus (RAG, CPT, LoRA)."""


def bootstrap_config(results: dict) -> BootstrapConfig:
    """The suite's bootstrap settings (defaults for results written before the suite had them)."""
    return BootstrapConfig(**(results.get("config", {}).get("bootstrap") or {}))


def score_interval(scored: dict | None, metric: str, cfg: BootstrapConfig) -> Interval | None:
    """Mean ``metric`` (percent) of a scored split or task with its bootstrap interval (items in id order, as in
    :func:`paired_items`, so a score's standard error is the same in every table); ``None`` without per-item
    scores."""
    scores = item_scores(scored, metric)
    return None if not scores else bootstrap_mean([scores[i] for i in sorted(scores)], cfg).scaled(100)


def paired_items(base: dict[str, float], method: dict[str, float],
                 cfg: BootstrapConfig) -> tuple[Interval, Interval, Interval] | None:
    """``(base, method, method - base)`` in percent over the item ids both hold (sorted, so the pairing never
    depends on file order); ``None`` when they share no item."""
    ids = sorted(base.keys() & method.keys())
    if not ids:
        return None
    a, b = [base[i] for i in ids], [method[i] for i in ids]
    return (bootstrap_mean(a, cfg).scaled(100), bootstrap_mean(b, cfg).scaled(100),
            paired_difference(a, b, cfg).scaled(100))


@dataclass(frozen=True)
class Comparison:
    """A method against a reference (the backbone, or another method in a claim) on one task and metric:
    the stored point estimates, and the intervals where both kept per-item scores."""

    task: str
    metric: str
    base_point: float | None
    method_point: float | None
    base: Interval | None = None
    method: Interval | None = None
    delta: Interval | None = None

    @property
    def verdict(self) -> str:
        return NO_INTERVAL if self.delta is None else verdict(self.delta)

    @property
    def point_delta(self) -> float | None:
        if self.delta is not None:
            return self.delta.estimate
        return None if None in (self.base_point, self.method_point) else self.method_point - self.base_point

    def row(self) -> Row | None:
        """The comparison as :mod:`mlpmem.evaluation.compare`'s row (for its plot), if it has intervals."""
        if self.delta is None:
            return None
        return Row(self.task, COMPARE_METRICS[self.metric], self.base, self.method, self.delta)

    def as_dict(self) -> dict:
        n = None if self.delta is None else self.delta.n
        return {"base": _interval_dict(self.base, self.base_point, n),
                "method": _interval_dict(self.method, self.method_point, n),
                "delta_vs_base": _interval_dict(self.delta, self.point_delta, n), "verdict": self.verdict}


def _interval_dict(interval: Interval | None, point: float | None, n: int | None) -> dict:
    """``{estimate, stderr, ci95, n}``; without an interval its point estimate with ``stderr``/``ci95`` null."""
    return interval.as_dict() if interval is not None else {"estimate": point, "stderr": None, "ci95": None, "n": n}


def compare_scored(task: str, metric: str, base: dict | None, method: dict | None,
                   cfg: BootstrapConfig) -> Comparison:
    """``method`` against ``base`` (two scored splits or tasks) on ``metric``, paired by item id."""
    points = [(s or {}).get(metric) for s in (base, method)]
    a, b = item_scores(base, metric), item_scores(method, metric)
    paired = paired_items(a, b, cfg) if a and b else None
    return Comparison(task, metric, *points, *(paired or ()))


def split_task(bench: str, split: str) -> str:
    """The task name of a benchmark's split in the tables: ``synthetic``, ``synthetic held-out``."""
    return bench if split == "test" else f"{bench} {split.replace('_', '-')}"


def _qa_pairs(results: dict, order: list[str], splits: tuple[str, ...] = SPLITS):
    """``(method, benchmark, split, backbone's scores, method's scores)`` of every method but the backbone."""
    for method in (m for m in order if m != BASE):
        for bench, b in results["benchmarks"].items():
            base, mine = b["methods"].get(BASE), b["methods"].get(method)
            if base is not None and mine is not None:
                for split in (s for s in splits if s in b["questions"] and s in mine):
                    yield method, bench, split, base.get(split), mine[split]


def qa_comparisons(results: dict, cfg: BootstrapConfig, order: list[str],
                   splits: tuple[str, ...] = SPLITS) -> dict[str, list[Comparison]]:
    """``{method: [Comparison]}`` of every method (in ``order``) against the backbone, per benchmark, split (of
    ``splits``) and metric, on the questions both answered."""
    out: dict[str, list[Comparison]] = {}
    for method, bench, split, base, mine in _qa_pairs(results, order, splits):
        out.setdefault(method, []).extend(compare_scored(split_task(bench, split), m, base, mine, cfg)
                                          for m in QA_METRICS)
    return out


def contrast_comparisons(results: dict, cfg: BootstrapConfig) -> list[tuple[str, str, Comparison]]:
    """``(method, reference, Comparison)`` of every pair of :data:`CONTRASTS` both scored, per benchmark and QA
    metric, on the test questions both answered."""
    out = []
    for method, reference in CONTRASTS:
        for bench, b in results["benchmarks"].items():
            mine, theirs = b["methods"].get(method), b["methods"].get(reference)
            if mine is not None and theirs is not None and "test" in mine and "test" in theirs:
                out += [(method, reference, compare_scored(bench, m, theirs["test"], mine["test"], cfg))
                        for m in QA_METRICS]
    return out


def no_regression_methods(results: dict) -> dict[str, dict]:
    """``{method: {task: scores}}`` of the no-regression battery (on the models of ``memory_from``)."""
    name = results["config"]["no_regression"]["memory_from"]
    methods = results["benchmarks"].get(name, {}).get("methods", {})
    return {m: r["no_regression"] for m, r in methods.items() if r.get("no_regression")}


def task_metrics(scores: dict) -> tuple[str, ...]:
    """The metrics of a no-regression task: EM / F1 of the cloze facts, the two accuracies of multiple choice."""
    return QA_METRICS if "em" in scores else CHOICE_METRICS


def no_regression_comparisons(results: dict, cfg: BootstrapConfig,
                              order: list[str]) -> dict[str, list[Comparison]]:
    """``{method: [Comparison]}`` of every method's battery against the backbone's, per task and metric."""
    table = no_regression_methods(results)
    base = table.get(BASE)
    if base is None:
        return {}
    return {method: [compare_scored(task, metric, s, table[method].get(task), cfg)
                     for task, s in base.items() for metric in task_metrics(s)]
            for method in order if method in table and method != BASE}


def mean_f1(results: dict, method: str, cfg: BootstrapConfig) -> tuple[float | None, Interval | None]:
    """A method's test F1 averaged over the benchmarks (each weighs the same): the point estimate and, when every
    benchmark kept per-item scores, the stratified bootstrap interval."""
    tests = [(b["methods"].get(method) or {}).get("test") for b in results["benchmarks"].values()]
    tests = [t for t in tests if t]
    if not tests:
        return None, None
    point = sum(t["f1"] for t in tests) / len(tests)
    columns = [item_scores(t, "f1") for t in tests]
    if any(not c for c in columns):
        return point, None
    return point, average_mean([[c[i] for i in sorted(c)] for c in columns], cfg).scaled(100)


def intervals_json(results: dict, cfg: BootstrapConfig, order: list[str]) -> dict:
    """The machine-readable intervals: per QA benchmark ``n_test`` and per method and split each metric with
    ``stderr`` / ``ci95`` and its ``delta_vs_base``; per no-regression task ``n_items`` and the same per method.
    A metric without per-item scores has ``stderr`` and ``ci95`` null."""
    qa = {}
    for bench, b in results["benchmarks"].items():
        entry = {"n_test": b["questions"].get("test"), "methods": {}}
        if "held_out" in b["questions"]:
            entry["n_held_out"] = b["questions"]["held_out"]
        for method in (m for m in order if m in b["methods"]):
            r = b["methods"][method]
            for split in (s for s in SPLITS if s in r):
                entry["methods"].setdefault(method, {})[split] = {
                    JSON_NAMES[m]: _interval_dict(score_interval(r[split], m, cfg), r[split].get(m), r[split].get("n"))
                    for m in QA_METRICS}
        qa[bench] = entry
    for method, bench, split, base, mine in _qa_pairs(results, order):
        qa[bench]["methods"][method][split]["delta_vs_base"] = {
            JSON_NAMES[m]: _delta_dict(compare_scored(bench, m, base, mine, cfg)) for m in QA_METRICS}
    contrasts = [{"method": m, "reference": r, "benchmark": c.task, "metric": JSON_NAMES[c.metric], **_delta_dict(c)}
                 for m, r, c in contrast_comparisons(results, cfg)]
    return {"bootstrap": dataclasses.asdict(cfg), "qa": qa, "contrasts": contrasts,
            "no_regression": _no_regression_json(results, cfg, order)}


def _no_regression_json(results: dict, cfg: BootstrapConfig, order: list[str]) -> dict:
    table = no_regression_methods(results)
    out: dict = {}
    for method in (m for m in order if m in table):
        for task, s in table[method].items():
            entry = out.setdefault(task, {"n_items": s.get("n"), "methods": {}})
            entry["methods"][method] = {JSON_NAMES[m]: _interval_dict(score_interval(s, m, cfg), s.get(m), s.get("n"))
                                        for m in task_metrics(s)}
    for method, comparisons in no_regression_comparisons(results, cfg, order).items():
        for c in comparisons:
            out[c.task]["methods"][method].setdefault("delta_vs_base", {})[JSON_NAMES[c.metric]] = _delta_dict(c)
    return out


def _delta_dict(c: Comparison) -> dict:
    return {**c.as_dict()["delta_vs_base"], "verdict": c.verdict}
