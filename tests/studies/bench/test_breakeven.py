"""Break-even arithmetic on constructed costs, and growth laws fitted on synthetic points (no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from mlpmem.errors import ConfigError
from studies.bench.breakeven import (
    MethodCost,
    RequestShape,
    break_even,
    crossing_size,
    fit_power_law,
    plot_totals,
)

SHAPE = RequestShape(prompt_tokens=256, new_tokens=10)


def test_memory_dearer_up_front_and_cheaper_per_request_breaks_even_after():
    memory = MethodCost("memory", offline_s=1000.0, ttft_s=0.1, decode_s=0.01)  # 0.2 s a request
    rag = MethodCost("rag", offline_s=100.0, ttft_s=0.3, decode_s=0.02)  # 0.5 s a request
    result = break_even(memory, rag, SHAPE)
    assert (result.verdict, result.requests) == ("after", 3001)  # 900 s / 0.3 s = 3000 requests tie exactly
    assert memory.total(3001, SHAPE) < rag.total(3001, SHAPE)
    assert memory.total(3000, SHAPE) == pytest.approx(rag.total(3000, SHAPE))
    assert result.describe() == "cheaper than rag after 3,001 requests"


def test_never_always_and_until():
    memory = MethodCost("memory", offline_s=1000.0, ttft_s=0.2, decode_s=0.02)
    slower_online = MethodCost("a", offline_s=10.0, ttft_s=0.1, decode_s=0.01)
    assert break_even(memory, slower_online, SHAPE).verdict == "never"
    dearer_everywhere = MethodCost("b", offline_s=2000.0, ttft_s=0.3, decode_s=0.03)
    assert break_even(memory, dearer_everywhere, SHAPE).verdict == "always"
    cheap_online_dear_offline = MethodCost("c", offline_s=1100.0, ttft_s=0.1, decode_s=0.01)  # 0.2 vs 0.4 s
    result = break_even(memory, cheap_online_dear_offline, SHAPE)
    assert (result.verdict, result.requests) == ("until", 500)
    assert memory.total(499, SHAPE) < cheap_online_dear_offline.total(499, SHAPE)
    assert memory.total(501, SHAPE) > cheap_online_dear_offline.total(501, SHAPE)
    same = MethodCost("d", offline_s=1000.0, ttft_s=0.2, decode_s=0.02)
    assert break_even(memory, same, SHAPE).verdict == "always"


def test_bad_costs_are_one_line_errors():
    with pytest.raises(ConfigError, match="memory: decode_s must be a finite number >= 0"):
        MethodCost("memory", 1.0, 0.1, float("nan"))
    with pytest.raises(ConfigError, match="prompt_tokens >= 1"):
        RequestShape(0, 5)


def test_power_law_recovers_its_exponent():
    sizes = [4e4, 2e5, 1.4e6]
    law = fit_power_law(sizes, [3e-3 * s**1.0 for s in sizes])
    assert law.exponent == pytest.approx(1.0) and law.coefficient == pytest.approx(3e-3) and law.r2 == pytest.approx(1)
    flat = fit_power_law(sizes, [0.05, 0.05, 0.05])
    assert flat.exponent == pytest.approx(0.0, abs=1e-12) and crossing_size(flat, 6.0) is None
    sqrt = fit_power_law(sizes, [2.0 * s**0.5 for s in sizes])
    assert float(sqrt(1e8)) == pytest.approx(2.0 * 1e4)
    assert crossing_size(sqrt, 2.0 * 1e4) == pytest.approx(1e8)


def test_power_law_refuses_what_it_cannot_fit():
    with pytest.raises(ConfigError, match="two or more distinct sizes"):
        fit_power_law([1e5, 1e5], [1.0, 2.0])
    with pytest.raises(ConfigError, match="positive sizes and costs"):
        fit_power_law([1e5, 2e5], [0.0, 2.0])


def test_plot_writes_a_png(tmp_path):
    methods = [MethodCost("memory", 1000.0, 0.1, 0.01), MethodCost("rag", 100.0, 0.3, 0.02)]
    plot_totals(methods, SHAPE, 10_000, "40k tokens", tmp_path / "totals.png")
    assert (tmp_path / "totals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.isclose(methods[0].total(np.array([0.0]), SHAPE)[0], 1000.0)
