"""Break-even arithmetic on constructed costs ("never" included), growth laws fitted on synthetic points, FLOP
estimates and the projection on constructed rates (no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from mlpmem.errors import ConfigError
from studies.bench.breakeven import (
    MethodCost,
    RequestShape,
    break_even,
    crossing_size,
    fit_linear,
    fit_power_law,
    flops,
    plot_totals,
)
from studies.bench.breakeven.costs import break_evens
from studies.bench.breakeven.growth import growth_laws
from studies.bench.breakeven.projection import PaperRegime, six_x_size

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


def test_linear_law_recovers_its_slope_and_intercept():
    sizes = [4e4, 2e5, 1.4e6]
    law = fit_linear(sizes, [12.0 + 3e-3 * s for s in sizes])
    assert law.slope == pytest.approx(3e-3) and law.intercept == pytest.approx(12.0) and law.r2 == pytest.approx(1)
    assert float(law(1e8)) == pytest.approx(12.0 + 3e5)
    flat = fit_linear(sizes, [0.05] * 3)
    assert flat.slope == pytest.approx(0.0, abs=1e-15) and flat.r2 == 1.0
    noisy = fit_linear(sizes, [1.0, 5.0, 2.0])
    assert 0 <= noisy.r2 < 1
    with pytest.raises(ConfigError, match="two or more distinct sizes"):
        fit_linear([1e5], [1.0])
    with pytest.raises(ConfigError, match="finite sizes and costs"):
        fit_linear([1e5, 2e5], [1.0, float("inf")])


def test_growth_laws_of_entries_skip_what_one_size_lacks():
    entries = [{"tokens": n, "offline_seconds": {"memory_parts": {"keys": 2e-3 * n}},
                "search_s_per_token": {"knnlm-exact": 1e-9 * n, **({"knnlm": 1e-4} if n > 1e5 else {})}}
               for n in (4e4, 2e5, 1.4e6)]
    growth = growth_laws(entries)
    assert growth["key extraction"]["linear"]["slope"] == pytest.approx(2e-3)
    assert growth["key extraction"]["power"]["exponent"] == pytest.approx(1.0)
    assert growth["kNN-LM search per token, IVF-PQ"]["power"]["exponent"] == pytest.approx(0.0, abs=1e-9)
    assert growth["teacher"] == {"unit": "s", "points": []}


def test_break_even_tables_say_never():
    shape = RequestShape(8, 2)
    offline = {"memory": 100.0, "rag": 1.0, "knnlm-exact": 50.0}
    online = {"memory": {"1": {"ttft_per_request_s": 0.2, "decode_s": 0.05}},
              "rag": {"1": {"ttft_per_request_s": 0.1, "decode_s": 0.05}},  # cheaper per request and offline
              "knnlm-exact": {"1": {"ttft_per_request_s": 0.2, "decode_s": 0.1}}}
    table = break_evens(offline, online, shape)["1"]
    assert table["rag"] == {"against": "rag", "verdict": "never", "requests": None}
    assert table["knnlm-exact"] == {"against": "knnlm-exact", "verdict": "after", "requests": 501}  # 50 s / 0.1 s


def test_flop_estimates():
    assert flops.search("exact", 64, 1000, 10) == 2 * 64 * 1000 * 10
    assert flops.search("ivf_flat", 64, 1000, 1, nlist=10, nprobe=2) == 2 * 64 * (10 + 200)
    assert flops.search("ivf_pq", 64, 1000, 1, nlist=10, nprobe=2, pq_bytes=8) == 2 * 64 * (10 + 256) + 200 * 8
    assert flops.ivf_build("exact", 64, 1000, 10, 500) == 0
    assert flops.memory_training(10, 5, 100) == (60 + 20) * 100
    assert flops.finetune(100, 7, 10, full=True) == 6000 and flops.finetune(100, 7, 10, full=False) == 4420
    assert flops.encoding(None, 100) is None


def test_projection_reaches_the_papers_datastore_and_six_times():
    regime = PaperRegime()
    assert 5e9 * (regime.key_dim * regime.key_bytes + regime.value_bytes) / 1e12 == pytest.approx(40.98, abs=0.01)
    bb_step = 2 * regime.backbone_parameters / 1e12  # decode at 1 TFLOP/s: 14 ms a step
    rates = {"decode": 1e12, "search": 1e9}
    tokens = six_x_size(regime, rates)
    search = flops.search("ivf_pq", regime.key_dim, int(tokens), 1, regime.nlist, regime.nprobe, regime.pq_bytes)
    memory_step = bb_step * (1 + regime.memory_parameters / regime.backbone_parameters)
    assert (bb_step + search / 1e9) / memory_step == pytest.approx(6.0, rel=1e-6)
    assert six_x_size(regime, {"decode": 1e12, "search": 1e3}) is None  # the fixed part of a search already costs more


def test_header_names_the_command_that_reproduces_it():
    from studies.bench.breakeven.report import header

    results = {"config": {"sizes": [6000, 40000], "overrides": ["train.epochs=1"], "finetune": [], "repeats": 5,
                          "warmup": 1, "serving_batch": 4},
               "request": {"prompt_tokens": 256, "new_tokens": 32}, "run_config": "quick", "machine": {}}
    assert "`python -m studies bench breakeven quick --sizes 6000,40000 --set train.epochs=1 --finetune none`" in \
        header(results)[1]
    results["config"]["finetune"] = ["cpt", "lora"]
    assert "--finetune" not in header(results)[1]
    results["config"].update(repeats=9, search_keys=[10**7, 2 * 10**7])  # every option off its default is named
    assert "--sizes 6000,40000 --set train.epochs=1 --repeats 9 --search-keys 10000000,20000000`" in header(results)[1]
