"""When does a method pay for its offline cost? Total cost against requests, break-even points and growth laws.

A method's cost for ``n`` requests of one shape (a prompt of P tokens, N tokens generated) is

    total(n) = offline + n · (ttft + N · decode)

with ``offline`` the one-off cost of building it (seconds), ``ttft`` the time to the first token of a P-token
prompt and ``decode`` the time per generated token, all measured on one machine. The memory breaks even against
another method after ``n* = (offline_mem − offline_other) / (request_other − request_mem)`` requests when each of
its requests is cheaper; when it is dearer per request and dearer offline it never does.

Growth laws are power laws ``cost = a · size^b`` fitted by least squares in log-log space; a projection from one is
printed as a projection with its fitted exponent, never as a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlpmem.errors import ConfigError


@dataclass(frozen=True)
class RequestShape:
    """A request: ``prompt_tokens`` read, ``new_tokens`` generated."""

    prompt_tokens: int
    new_tokens: int

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.new_tokens < 0:
            raise ConfigError(f"a request needs prompt_tokens >= 1 and new_tokens >= 0, got {self}")


@dataclass(frozen=True)
class MethodCost:
    """One method's measured costs (seconds) at one corpus size; ``ttft`` is for the request shape's prompt."""

    name: str
    offline_s: float
    ttft_s: float
    decode_s: float

    def __post_init__(self) -> None:
        for what in ("offline_s", "ttft_s", "decode_s"):
            value = getattr(self, what)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{self.name}: {what} must be a finite number >= 0, got {value!r}")

    def per_request(self, shape: RequestShape) -> float:
        return self.ttft_s + shape.new_tokens * self.decode_s

    def total(self, requests: np.ndarray | float, shape: RequestShape) -> np.ndarray | float:
        return self.offline_s + requests * self.per_request(shape)


@dataclass(frozen=True)
class BreakEven:
    """How the memory's total cost compares with another method's as requests grow.

    ``verdict`` is ``always`` (never dearer), ``after`` (cheaper from ``requests`` on), ``until`` (cheaper only
    below ``requests``) or ``never``; ``requests`` is the first whole number of requests where the order flips.
    """

    against: str
    verdict: str
    requests: int | None

    def describe(self) -> str:
        if self.verdict in ("always", "never"):
            return f"{self.verdict} cheaper than {self.against}"
        return f"cheaper than {self.against} {self.verdict} {self.requests:,} requests"


def break_even(memory: MethodCost, other: MethodCost, shape: RequestShape) -> BreakEven:
    """Where ``memory``'s total cost crosses ``other``'s for requests of ``shape``."""
    d_offline = memory.offline_s - other.offline_s  # what the memory pays more up front
    d_request = other.per_request(shape) - memory.per_request(shape)  # what it saves on each request
    if d_offline <= 0 and d_request >= 0:
        return BreakEven(other.name, "always", None)
    if d_offline > 0 and d_request <= 0:
        return BreakEven(other.name, "never", None)
    crossing = d_offline / d_request
    if d_offline > 0:  # dearer up front, cheaper per request: cheaper once n exceeds the crossing
        return BreakEven(other.name, "after", math.floor(crossing) + 1)
    return BreakEven(other.name, "until", math.ceil(crossing))


@dataclass(frozen=True)
class PowerLaw:
    """``cost = coefficient · size ** exponent``, fitted on ``points`` measured sizes (``r2`` in log space)."""

    coefficient: float
    exponent: float
    r2: float
    points: int

    def __call__(self, size: float | np.ndarray) -> float | np.ndarray:
        return self.coefficient * np.power(size, self.exponent)


def fit_power_law(sizes: list[float], costs: list[float]) -> PowerLaw:
    """Least squares of log(cost) on log(size); needs two or more distinct positive sizes and positive costs."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(costs, dtype=float)
    if x.shape != y.shape or len(x) < 2 or len(set(x.tolist())) < 2:
        raise ConfigError(f"a growth law needs two or more distinct sizes with a cost each, got {sizes} / {costs}")
    if (x <= 0).any() or (y <= 0).any():
        raise ConfigError(f"a power law needs positive sizes and costs, got {sizes} / {costs}")
    lx, ly = np.log(x), np.log(y)
    exponent, intercept = np.polyfit(lx, ly, 1)
    residual = ly - (intercept + exponent * lx)
    spread = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / spread if spread > 0 else 1.0
    return PowerLaw(float(math.exp(intercept)), float(exponent), r2, len(x))


def crossing_size(ratio: PowerLaw, target: float) -> float | None:
    """The size where a fitted law (e.g. kNN-LM decode time ÷ the memory's) reaches ``target``; None for a flat
    law, which reaches no other value."""
    if math.isclose(ratio.exponent, 0.0, abs_tol=1e-9) or target <= 0:  # flat within rounding
        return None
    return float((target / ratio.coefficient) ** (1.0 / ratio.exponent))


def plot_totals(methods: list[MethodCost], shape: RequestShape, max_requests: int, title: str, path) -> None:
    """Total cost (hours) against requests, one line per method, saved to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.linspace(0, max_requests, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in methods:
        ax.plot(n, method.total(n, shape) / 3600, label=method.name)
    ax.set_xlabel(f"requests ({shape.prompt_tokens}-token prompt, {shape.new_tokens} generated)")
    ax.set_ylabel("total cost (hours, offline + online)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
