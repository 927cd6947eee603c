"""Exact match and token F1 with SQuAD's answer normalization (the official v1.1 evaluation script).

normalize: lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace. A prediction
scores the maximum over the gold answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)  # both empty: 1, one empty: 0
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over_answers(metric, prediction: str, answers: list[str]) -> float:
    return max((metric(prediction, a) for a in answers), default=0.0)


def score(predictions: list[str], answers: list[list[str]]) -> dict:
    """Mean EM and F1 in percent over paired predictions and gold answer lists."""
    if len(predictions) != len(answers):
        raise ValueError(f"{len(predictions)} predictions for {len(answers)} answer lists")
    n = max(1, len(predictions))
    em = sum(best_over_answers(exact_match, p, a) for p, a in zip(predictions, answers))
    f = sum(best_over_answers(f1, p, a) for p, a in zip(predictions, answers))
    return {"em": 100 * em / n, "f1": 100 * f / n, "n": len(predictions)}
