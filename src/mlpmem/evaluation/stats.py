"""Standard errors and paired method-vs-base differences from per-item scores, by a seeded bootstrap.

A score is the mean of per-item scores (1/0 for accuracy, a value in [0, 1] for F1). Its uncertainty is
the item sampling: had the benchmark drawn other items, the score would differ. The percentile bootstrap
resamples the items with replacement ``resamples`` times and reads the interval off the resampled means;
the standard error is their standard deviation.

A method is compared with the base on the **same** items, so the difference is estimated **paired**: each
resample draws items and takes the mean of ``method - base`` over them. Items that both get right or
both get wrong add nothing to its variance, so on correlated scores (the usual case: two models of one
backbone) the paired interval is much narrower than an unpaired one that resamples the two score lists
independently (:func:`unpaired_difference`, kept for comparison and for the tests).

A difference is judged by where its interval lies (:func:`verdict`): above zero, below zero, or
covering it ("not distinguishable from base"). The average over several tasks resamples the items of
every task independently (a stratified bootstrap), each task weighing the same.

Everything is a pure function of the scores and :class:`BootstrapConfig` (seeded ``numpy`` generator):
the same call gives the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlpmem.config import Config
from mlpmem.errors import ConfigError

ABOVE, BELOW, SAME = "above", "below", "not distinguishable from base"
CHUNK = 500
"""Resamples drawn at once (bounds the (chunk, n) index matrix)."""


@dataclass
class BootstrapConfig(Config):
    resamples: int = 10000
    """Bootstrap resamples of the items."""
    confidence: float = 0.95
    """Coverage of the percentile interval."""
    seed: int = 0
    """Seed of the resampling generator: the same seed, the same interval."""

    def validate(self) -> None:
        if self.resamples < 100:
            raise ConfigError(f"bootstrap resamples must be >= 100, got {self.resamples}")
        if not 0 < self.confidence < 1:
            raise ConfigError(f"bootstrap confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` items with its bootstrap standard error and percentile interval ``[low, high]``."""

    estimate: float
    stderr: float
    low: float
    high: float
    n: int

    def scaled(self, factor: float) -> Interval:
        """The same interval in other units (e.g. ``100`` for percent)."""
        return Interval(self.estimate * factor, self.stderr * factor, self.low * factor, self.high * factor, self.n)

    def as_dict(self) -> dict:
        return {"estimate": self.estimate, "stderr": self.stderr, "ci95": [self.low, self.high], "n": self.n}


def _scores(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ConfigError(f"{what} needs a non-empty list of per-item scores, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ConfigError(f"{what} holds a NaN or infinite per-item score")
    return array


def _resampled_means(columns: list[np.ndarray], weights: list[float], cfg: BootstrapConfig) -> np.ndarray:
    """``(resamples,)``: Σ_k weight_k · mean of column k over a resample of its items, each column resampled
    on its own draw (columns of one task are passed already subtracted, so they share the draw)."""
    rng = np.random.default_rng(cfg.seed)
    out = np.zeros(cfg.resamples)
    for start in range(0, cfg.resamples, CHUNK):
        size = min(CHUNK, cfg.resamples - start)
        for column, weight in zip(columns, weights):
            picks = rng.integers(0, column.size, size=(size, column.size))  # (size, n)
            out[start : start + size] += weight * column[picks].mean(axis=1)
    return out


def _interval(estimate: float, means: np.ndarray, n: int, cfg: BootstrapConfig) -> Interval:
    tail = (1 - cfg.confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(float(estimate), float(means.std(ddof=1)), float(low), float(high), n)


def bootstrap_mean(scores: Sequence[float], cfg: BootstrapConfig | None = None) -> Interval:
    """The mean of ``scores`` with its bootstrap standard error and interval."""
    cfg = cfg or BootstrapConfig()
    x = _scores(scores, "bootstrap_mean")
    return _interval(x.mean(), _resampled_means([x], [1.0], cfg), x.size, cfg)


def _pair(base: Sequence[float], method: Sequence[float]) -> np.ndarray:
    a, b = _scores(base, "the base"), _scores(method, "the method")
    if a.size != b.size:
        raise ConfigError(f"paired scores need the same items: {a.size} base scores, {b.size} method scores")
    return b - a


def paired_difference(base: Sequence[float], method: Sequence[float], cfg: BootstrapConfig | None = None) -> Interval:
    """``mean(method - base)`` over the same items (``base[i]`` and ``method[i]`` score item i), resampling
    the items once for both."""
    cfg = cfg or BootstrapConfig()
    d = _pair(base, method)
    return _interval(d.mean(), _resampled_means([d], [1.0], cfg), d.size, cfg)


def unpaired_difference(base: Sequence[float], method: Sequence[float],
                        cfg: BootstrapConfig | None = None) -> Interval:
    """``mean(method) - mean(base)`` with the two lists resampled independently (ignores the pairing)."""
    cfg = cfg or BootstrapConfig()
    a, b = _scores(base, "the base"), _scores(method, "the method")
    means = _resampled_means([b, a], [1.0, -1.0], cfg)
    return _interval(b.mean() - a.mean(), means, min(a.size, b.size), cfg)


def paired_average(pairs: list[tuple[Sequence[float], Sequence[float]]],
                   cfg: BootstrapConfig | None = None) -> Interval:
    """The average over tasks of each task's paired difference (every task weighs the same), resampling
    each task's items independently; ``n`` is the number of items in all."""
    cfg = cfg or BootstrapConfig()
    if not pairs:
        raise ConfigError("paired_average needs at least one task")
    diffs = [_pair(base, method) for base, method in pairs]
    weights = [1 / len(diffs)] * len(diffs)
    estimate = float(np.mean([d.mean() for d in diffs]))
    return _interval(estimate, _resampled_means(diffs, weights, cfg), sum(d.size for d in diffs), cfg)


def average_mean(columns: list[Sequence[float]], cfg: BootstrapConfig | None = None) -> Interval:
    """The average over tasks of each task's mean score, each task's items resampled independently."""
    cfg = cfg or BootstrapConfig()
    if not columns:
        raise ConfigError("average_mean needs at least one task")
    xs = [_scores(c, "average_mean") for c in columns]
    estimate = float(np.mean([x.mean() for x in xs]))
    return _interval(estimate, _resampled_means(xs, [1 / len(xs)] * len(xs), cfg), sum(x.size for x in xs), cfg)


def verdict(delta: Interval) -> str:
    """``"above"`` if the whole interval is above zero, ``"below"`` if below, else not distinguishable."""
    if delta.low > 0:
        return ABOVE
    if delta.high < 0:
        return BELOW
    return SAME
