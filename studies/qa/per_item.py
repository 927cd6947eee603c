"""Per-item scores kept in the QA suite's method files, so that the report can bootstrap intervals over them.

A scored split (``methods/<method>.json``'s ``test`` / ``held_out``) and a no-regression task keep, beside
their means, a ``per_item`` record in parallel lists: ``{"ids": [...], <metric>: [...], ...}``, one entry a
question (EM 1/0, F1 in [0, 1] rounded to :data:`DIGITS` decimals) or a multiple-choice item (``acc_ll`` /
``acc_pmi`` 1/0). The scale is 0..1 (as lm-eval logs per-item scores); the stored means stay in percent.
Items are matched across methods by id, never by position, so two methods are paired over the questions
both answered.
"""

from __future__ import annotations

from mlpmem.errors import CorruptArtifact
from studies.qa.metrics import best_over_answers, exact_match, f1

PER_ITEM = "per_item"
DIGITS = 4
"""Decimals kept of a per-question F1 (a mean in percent moves by at most 0.005 points)."""


def qa_per_item(predictions: list[dict]) -> dict:
    """``{"ids", "em", "f1"}`` of predictions ``[{"id", "prediction", "answers"}]`` (as
    :func:`~studies.qa.eval_qa.evaluate_questions` returns them, every one of them)."""
    return {"ids": [str(p["id"]) for p in predictions],
            "em": [int(best_over_answers(exact_match, p["prediction"], p["answers"])) for p in predictions],
            "f1": [round(best_over_answers(f1, p["prediction"], p["answers"]), DIGITS) for p in predictions]}


def item_scores(scored: dict | None, metric: str) -> dict[str, float] | None:
    """``{item id: score}`` (0..1) of ``metric`` in a scored split or task, or ``None`` when it kept no per-item
    scores of that metric (a metric it does not have)."""
    record = (scored or {}).get(PER_ITEM)
    if not isinstance(record, dict) or metric not in record:
        return None
    ids, values = record.get("ids"), record[metric]
    if not isinstance(ids, list) or not isinstance(values, list) or len(ids) != len(values):
        raise CorruptArtifact(f"per-item {metric} scores: {_size(values)} values for {_size(ids)} ids")
    scores = {str(i): float(v) for i, v in zip(ids, values)}
    if len(scores) != len(ids):
        raise CorruptArtifact(f"per-item {metric} scores repeat an item id ({len(ids) - len(scores)} repeats)")
    return scores


def _size(value) -> str:
    return str(len(value)) if isinstance(value, list) else "no list of"


def without_per_item(obj):
    """``obj`` (a results tree) with every ``per_item`` record dropped: the compact copy kept in the docs."""
    if isinstance(obj, dict):
        return {k: without_per_item(v) for k, v in obj.items() if k != PER_ITEM}
    if isinstance(obj, list):
        return [without_per_item(v) for v in obj]
    return obj
