"""Which way a method moves multiple-choice answers: counted from lm-eval samples, by choice length."""

from __future__ import annotations

from studies.qa.choice_shift import Shift, choice, length_shift, shift_table

CHOICES = ["a long choice", "short", "mid one"]


def sample(item: str, lls: list[float], unconditional: list[float] | None = None) -> dict:
    responses = [[ll, False] for ll in lls + (unconditional or [])]
    return {"doc_id": 0, "doc": {"id": item, "choices": CHOICES}, "filtered_resps": responses}


def test_the_choice_reads_only_the_conditional_log_likelihoods():
    # PMI's unconditional responses come after the choices' own: a large one there must not be chosen
    assert choice(sample("x", [-3.0, -1.0, -2.0], [0.0, -9.0, -9.0])) == (1, CHOICES)
    assert choice({"doc": {"id": "x"}, "filtered_resps": [[-1.0, False]]}) is None  # no choices logged


def test_length_shift_counts_changed_choices_by_length():
    base = {"samples": {"t": [sample("1", [-1, -2, -3]), sample("2", [-1, -2, -3]), sample("3", [-3, -2, -1]),
                              sample("4", [-1, -2, -3])]}}
    method = {"samples": {"t": [sample("1", [-3, -1, -2]),    # long -> short: shorter
                                sample("2", [-1, -2, -3]),    # unchanged
                                sample("3", [-1, -2, -3]),    # mid -> long: longer
                                sample("9", [-3, -1, -2])]}}  # not scored by the base: not paired
    assert length_shift(base, method) == {"t": Shift(items=3, changed=2, shorter=1, longer=1)}
    table = shift_table({"memory": length_shift(base, method)}, "backbone")
    assert "| memory | 3 | 2 | 1 | 1 | 0 |" in table and "choice changed vs backbone" in table
