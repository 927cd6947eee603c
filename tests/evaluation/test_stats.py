"""Bootstrap standard errors and paired differences (mlpmem.evaluation.stats), and the method-vs-base table
(mlpmem.evaluation.compare) on constructed per-item scores: seeded, covering a known difference, paired
narrower than unpaired on correlated scores, the verdicts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlpmem.errors import ConfigError
from mlpmem.evaluation.compare import AVERAGE, compare, load_results, per_item, plot_deltas, rows_json, table
from mlpmem.evaluation.stats import (
    ABOVE,
    BELOW,
    SAME,
    BootstrapConfig,
    Interval,
    bootstrap_mean,
    paired_average,
    paired_difference,
    unpaired_difference,
    verdict,
)

FAST = BootstrapConfig(resamples=2000, seed=0)


def correlated(n: int, gain: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Binary scores of a base (60 % right) and a method that copies it and flips a ``gain`` share of its
    wrong items to right: strongly correlated, true difference ``gain * 0.4`` in expectation."""
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < 0.6).astype(float)
    method = base.copy()
    method[(base == 0) & (rng.random(n) < gain)] = 1.0
    return base, method


def test_bootstrap_is_seeded_and_matches_the_binomial_stderr():
    scores = np.random.default_rng(1).random(400) < 0.3
    a, b = bootstrap_mean(scores, FAST), bootstrap_mean(scores, FAST)
    assert a == b  # same seed, same interval
    assert bootstrap_mean(scores, BootstrapConfig(resamples=2000, seed=1)) != a
    p = scores.mean()
    assert a.estimate == pytest.approx(p) and a.n == 400
    assert a.stderr == pytest.approx(np.sqrt(p * (1 - p) / 400), rel=0.1)
    assert a.low < p < a.high


def test_paired_interval_covers_the_known_difference():
    base, method = correlated(2000, gain=0.25)
    true = (method - base).mean()
    d = paired_difference(base, method, FAST)
    assert d.estimate == pytest.approx(true)
    assert d.low < 0.1 < d.high  # the expected difference 0.25 * 0.4
    assert verdict(d) == ABOVE and verdict(paired_difference(method, base, FAST)) == BELOW


def test_paired_is_narrower_than_unpaired_on_correlated_scores():
    base, method = correlated(300, gain=0.1)
    paired, unpaired = paired_difference(base, method, FAST), unpaired_difference(base, method, FAST)
    assert paired.estimate == pytest.approx(unpaired.estimate)
    assert paired.high - paired.low < 0.5 * (unpaired.high - unpaired.low)
    assert paired.stderr < 0.5 * unpaired.stderr


def test_verdicts_and_identical_scores():
    assert verdict(Interval(0.0, 1.0, -1.0, 2.0, 10)) == SAME
    assert verdict(Interval(1.0, 0.1, 0.5, 1.5, 10)) == ABOVE
    assert verdict(Interval(-1.0, 0.1, -1.5, -0.5, 10)) == BELOW
    same = paired_difference([1, 0, 1], [1, 0, 1], FAST)
    assert (same.estimate, same.low, same.high) == (0, 0, 0) and verdict(same) == SAME


def test_average_over_tasks_weighs_each_task_the_same():
    small, large = correlated(50, 0.5, seed=2), correlated(1000, 0.0, seed=3)
    avg = paired_average([small, large], FAST)
    assert avg.estimate == pytest.approx(((small[1] - small[0]).mean() + 0.0) / 2)
    assert avg.n == 1050


def test_bad_scores_and_config_are_one_line_errors():
    with pytest.raises(ConfigError, match="same items"):
        paired_difference([1, 0], [1, 0, 1])
    with pytest.raises(ConfigError, match="non-empty"):
        bootstrap_mean([])
    with pytest.raises(ConfigError, match="NaN"):
        bootstrap_mean([1.0, float("nan")])
    with pytest.raises(ConfigError, match="resamples"):
        BootstrapConfig(resamples=10)
    with pytest.raises(ConfigError, match="confidence"):
        BootstrapConfig(confidence=1.0)


def fake_results(columns: dict[str, dict[str, np.ndarray]]) -> dict:
    """An lm-eval results dict with logged samples: ``{task: {metric: per-item scores}}``."""
    samples = {}
    for task, metrics in columns.items():
        n = len(next(iter(metrics.values())))
        samples[task] = [{"doc_id": i, "doc": {"id": f"{task}:{i}"}, **{m: float(v[i]) for m, v in metrics.items()}}
                         for i in range(n)]
    return {"results": {t: {} for t in columns}, "samples": samples}


def test_compare_rows_table_json_and_plot(tmp_path):
    (b1, m1), (b2, m2) = correlated(400, 0.3, seed=4), correlated(400, 0.0, seed=5)
    base = fake_results({"t1": {"acc": b1, "acc_mutual_info": b1}, "t2": {"acc": b2, "acc_mutual_info": b2}})
    method = fake_results({"t1": {"acc": m1, "acc_mutual_info": 1 - m1}, "t2": {"acc": m2, "acc_mutual_info": m2}})
    method["samples"]["t2"] = method["samples"]["t2"][::-1][:300]  # other order, fewer items: paired by id
    rows = compare(base, method, cfg=FAST)
    by = {(r.task, r.metric): r for r in rows}
    assert set(by) == {(t, m) for t in ("t1", "t2", AVERAGE) for m in ("acc", "acc_mutual_info")}
    assert by["t1", "acc"].verdict == ABOVE and by["t1", "acc_mutual_info"].verdict == BELOW
    assert by["t2", "acc"].verdict == SAME and by["t2", "acc"].delta.n == 300
    assert by["t1", "acc"].base.estimate == pytest.approx(100 * b1.mean())  # percent
    text = table({"memory": rows})
    assert "| memory | t1 | acc | 400 |" in text and "not distinguishable from base" in text
    summary = rows_json({"memory": rows})["memory"]["t1"]["acc_mutual_info"]
    assert summary["verdict"] == BELOW and len(summary["delta_vs_base"]["ci95"]) == 2
    assert plot_deltas({"memory": rows}, tmp_path / "delta.png").stat().st_size > 0


def test_per_item_and_load_results_errors(tmp_path):
    expected = {"t": {"t:0": {"f1": 0.5}, "t:1": {"f1": 1.0}}}
    assert per_item(fake_results({"t": {"f1": np.array([0.5, 1.0])}})) == expected
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"results": {"t": {}}}))
    with pytest.raises(ConfigError, match="--log-samples"):
        load_results(path)
    with pytest.raises(ConfigError, match="no such"):
        load_results(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        load_results(path)
    with pytest.raises(ConfigError, match="t9"):
        compare(fake_results({"t": {"acc": np.ones(3)}}), fake_results({"t": {"acc": np.ones(3)}}), ["t9"])
