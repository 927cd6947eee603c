"""Operator profiles: what one call costs per operator, two ways side by side."""

from __future__ import annotations

import pytest
import torch

from studies.bench.op_profile import compare_profiles, op_profile, profile_summary, profile_table


def test_op_profile_counts_the_operators_a_function_runs():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    profile = op_profile(lambda: [a @ b for _ in range(3)] + [torch.softmax(a, -1)])
    assert profile["ops"]["aten::mm"]["calls"] == 3 and profile["ops"]["aten::softmax"]["calls"] == 1
    assert profile["total_ms"] == pytest.approx(sum(o["self_ms"] for o in profile["ops"].values()))


def _profile(**ops: float) -> dict:
    return {"total_ms": sum(ops.values()), "ops": {k: {"self_ms": v, "calls": 1} for k, v in ops.items()}}


def test_compare_profiles_takes_each_ways_top_operators_and_sums_the_rest():
    fast, slow = _profile(mm=10.0, add=1.0, copy=0.5), _profile(mm=8.0, to=9.0, add=1.0)
    rows = compare_profiles({"fp32": fast, "bf16": slow}, top=1)
    assert [r["op"] for r in rows] == ["mm", "to", "(other operators)"]
    assert rows[1] == {"op": "to", "fp32": 0.0, "fp32_calls": 0, "bf16": 9.0, "bf16_calls": 1}
    assert rows[-1]["fp32"] == pytest.approx(1.5) and rows[-1]["bf16"] == pytest.approx(1.0)
    text = profile_table(profile_summary({"fp32": fast, "bf16": slow}, top=1))
    assert "| `to` | 0 (0.0 %, 0) | 9 (50.0 %, 1) | — |" in text and "| total | 12 | 18 | 1.57 |" in text
