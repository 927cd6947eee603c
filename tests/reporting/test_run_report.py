"""The run's test table: memory-alone perplexity under a corpus head is set against the backbone's on the same
positions, not on all of them."""

from __future__ import annotations

from mlpmem.reporting.run_report import results_table


def _results(**test) -> dict:
    base = {"backbone": 30.0, "knnlm": 27.0, "memory": 29.0, "memory+backbone": 26.0, "tokens": 100}
    return {"test": {**base, **test}, "knnlm_chosen": {"k": 16, "temperature": 1.0, "lambda": 0.2},
            "train_seconds": 10.0, "memory_bytes": 2**20, "memory_tied_head": True, "datastore_bytes": 2**23,
            "datastore_tokens": 1000, "memory_trainable_parameters": 10, "memory_parameters": 20, "lambda": 0.4}


def memory_row(table: str) -> str:
    return next(line for line in table.splitlines() if line.startswith("| MLP Memory alone"))


def test_a_partial_head_is_compared_with_the_backbone_on_its_positions():
    row = memory_row(results_table(_results(memory_coverage=0.9, backbone_covered=25.0)))
    assert "90.0 %" in row and "the backbone there: 25.000" in row
    assert "+16.0 %" in row  # 29 against 25, not -3.3 % against 30


def test_a_full_head_or_an_old_result_uses_the_backbone_on_every_position():
    assert "-3.3 %" in memory_row(results_table(_results(memory_coverage=1.0, backbone_covered=30.0)))
    old = memory_row(results_table(_results(memory_coverage=0.9)))  # written before backbone_covered existed
    assert "90.0 %" in old and "backbone there" not in old and "-3.3 %" in old
