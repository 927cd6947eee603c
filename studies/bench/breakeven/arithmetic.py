"""When does a method pay for its offline cost? Total cost against requests, break-even points and growth laws.

A method's cost for ``n`` requests of one shape (a prompt of P tokens, the first token, then N decode steps) is

    total(n) = offline + n · (ttft + N · decode)

with ``offline`` the one-off cost of building it (seconds), ``ttft`` the time to the first token of a P-token
prompt and ``decode`` the time per further generated token, all measured on one machine. The memory breaks even against
another method after ``n* = (offline_mem − offline_other) / (request_other − request_mem)`` requests when each of
its requests is cheaper; when it is dearer per request and dearer offline it never does.

Growth laws are fitted on the measured sizes two ways: a straight line ``cost = a + b · size`` (least squares in the
corpus tokens; the slope is the cost per corpus token) and a power law ``cost = a · size^b`` (least squares in
log-log space; its exponent tells linear growth, ~1, from constant, ~0, and faster, e.g. an exact teacher's 2). A
projection from either is printed as a projection with its fitted law, never as a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlpmem.errors import ConfigError
from mlpmem.reporting.plots import pyplot


@dataclass(frozen=True)
class RequestShape:
    """A request: ``prompt_tokens`` read, the first token generated (its TTFT), then ``new_tokens`` decode steps."""

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
    x, y = _checked(sizes, costs)
    if (x <= 0).any() or (y <= 0).any():
        raise ConfigError(f"a power law needs positive sizes and costs, got {sizes} / {costs}")
    lx, ly = np.log(x), np.log(y)
    exponent, intercept = np.polyfit(lx, ly, 1)
    return PowerLaw(float(math.exp(intercept)), float(exponent), _r2(ly, intercept + exponent * lx), len(x))


@dataclass(frozen=True)
class LinearLaw:
    """``cost = intercept + slope · size``, fitted on ``points`` measured sizes (``r2`` of the fit)."""

    intercept: float
    slope: float
    r2: float
    points: int

    def __call__(self, size: float | np.ndarray) -> float | np.ndarray:
        return self.intercept + self.slope * np.asarray(size, dtype=float)


def _checked(sizes: list[float], costs: list[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(sizes, dtype=float), np.asarray(costs, dtype=float)
    if x.shape != y.shape or len(x) < 2 or len(set(x.tolist())) < 2:
        raise ConfigError(f"a growth law needs two or more distinct sizes with a cost each, got {sizes} / {costs}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ConfigError(f"a growth law needs finite sizes and costs, got {sizes} / {costs}")
    return x, y


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    """R² of a fit; 1 for constant costs (no spread to explain, up to rounding)."""
    spread = float(((y - y.mean()) ** 2).sum())
    if spread <= 1e-20 * float((y**2).sum()):
        return 1.0
    return 1.0 - float(((y - fitted) ** 2).sum()) / spread


def fit_linear(sizes: list[float], costs: list[float]) -> LinearLaw:
    """Least squares of cost on size; needs two or more distinct sizes."""
    x, y = _checked(sizes, costs)
    slope, intercept = np.polyfit(x, y, 1)
    return LinearLaw(float(intercept), float(slope), _r2(y, intercept + slope * x), len(x))


def crossing_size(ratio: PowerLaw, target: float) -> float | None:
    """The size where a fitted law (e.g. kNN-LM decode time ÷ the memory's) reaches ``target``; None for a flat
    law, which reaches no other value."""
    if math.isclose(ratio.exponent, 0.0, abs_tol=1e-9) or target <= 0:  # flat within rounding
        return None
    return float((target / ratio.coefficient) ** (1.0 / ratio.exponent))


def draw_totals(ax, methods: list[MethodCost], shape: RequestShape, max_requests: int, title: str,
                log: bool = False) -> None:
    """Total cost (hours) against requests on ``ax``, one line per method (``log``: both axes, from 1 request, so
    that crossings orders of magnitude apart all show)."""
    n = np.geomspace(1, max_requests, 200) if log else np.linspace(0, max_requests, 200)
    for method in methods:
        ax.plot(n, method.total(n, shape) / 3600, label=method.name)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(f"requests ({shape.prompt_tokens}-token prompt, {shape.new_tokens + 1} tokens generated)")
    ax.set_ylabel("total cost (hours, offline + online)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def plot_totals(methods: list[MethodCost], shape: RequestShape, max_requests: int, title: str, path) -> None:
    """Total cost (hours) against requests, one line per method, saved to ``path`` (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    draw_totals(ax, methods, shape, max_requests, title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
