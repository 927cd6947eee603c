"""The ``process_results`` hooks of the generation tasks: the QA suite's answer cut, then SQuAD EM / F1.

lm-eval cuts a generation at its ``until`` strings before anything else sees it, so a stop string the
model emits first (a 135M model often opens its answer with a newline) would leave an empty answer. The
tasks therefore stop lm-eval only at strings that end an answer wherever they appear (``Question:``,
``Context:``) and cut here, exactly as :func:`studies.qa.eval_qa.generate_answers` does:
leading whitespace skipped, then the text up to the first stop string (the newline included). Scores are
in lm-eval's 0..1 scale, the best over the item's gold answers.
"""

from __future__ import annotations

from studies.qa.eval_qa import CLOZE_STOPS, STOP_STRINGS, cut_at_stop
from studies.qa.metrics import best_over_answers, exact_match, f1


def _scores(answer: str, answers: list[str]) -> dict[str, float]:
    return {"em": best_over_answers(exact_match, answer, answers), "f1": best_over_answers(f1, answer, answers)}


def process_qa(doc: dict, results: list[str]) -> dict[str, float]:
    """EM / F1 of a closed-book answer (cut at a newline, ``Question:`` or ``Context:``)."""
    return _scores(cut_at_stop(results[0], STOP_STRINGS), list(doc["answers"]))


def process_cloze(doc: dict, results: list[str]) -> dict[str, float]:
    """EM / F1 of a cloze completion (cut at a newline, ``.``, ``,``, ``;``, `` and ``, `` or ``)."""
    return _scores(cut_at_stop(results[0], CLOZE_STOPS), list(doc["answers"]))
