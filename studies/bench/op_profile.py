"""Where a benchmark's CPU time goes, operator by operator: one extra, untimed round under ``torch.profiler``.

A ratio of wall times says that one way is slower, not why. :func:`op_profile` runs a function once under the
PyTorch profiler (CPU activity) and keeps every operator's self CPU time and call count; :func:`compare_profiles`
puts two ways' operators side by side (the union of each way's top operators, and the rest summed), so that a
reader sees which operators a precision or a code path makes slower. The profiler adds its own overhead to every
call, so the shares, not the absolute milliseconds, are what compare with the timed rounds.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile

from mlpmem.reporting.tables import markdown_table


def op_profile(fn: Callable[[], object]) -> dict:
    """``fn()`` once under the profiler: ``{"total_ms", "ops": {name: {"self_ms", "calls"}}}`` (self CPU time:
    an operator's own, without the operators it calls, so the ops sum to the total)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    ops = {e.key: {"self_ms": e.self_cpu_time_total / 1000.0, "calls": e.count} for e in prof.key_averages()}
    return {"total_ms": sum(o["self_ms"] for o in ops.values()), "ops": ops}


def compare_profiles(profiles: dict[str, dict], top: int = 12) -> list[dict]:
    """Rows ``{"op", <way>: self ms (0 when absent), <way>_calls, ...}`` for the union of every way's ``top``
    operators by self time (largest first by the first way, then the others), and a last ``(other operators)`` row
    with the rest of each way's total."""
    ways = list(profiles)
    chosen: list[str] = []
    for way in ways:
        ranked = sorted(profiles[way]["ops"].items(), key=lambda kv: kv[1]["self_ms"], reverse=True)
        chosen += [name for name, _ in ranked[:top] if name not in chosen]
    rows = []
    for name in chosen:
        row = {"op": name}
        for way in ways:
            op = profiles[way]["ops"].get(name, {"self_ms": 0.0, "calls": 0})
            row[way], row[f"{way}_calls"] = op["self_ms"], op["calls"]
        rows.append(row)
    rest = {"op": "(other operators)"}
    for way in ways:
        rest[way] = profiles[way]["total_ms"] - sum(r[way] for r in rows)
        rest[f"{way}_calls"] = sum(o["calls"] for n, o in profiles[way]["ops"].items() if n not in chosen)
    return [*rows, rest]


def profile_summary(profiles: dict[str, dict], top: int = 12) -> dict:
    """What a report keeps of :func:`op_profile` results: ``{"ways", "total_ms": {way: ms}, "rows"}`` (the rows of
    :func:`compare_profiles`)."""
    return {"ways": list(profiles), "total_ms": {w: p["total_ms"] for w, p in profiles.items()},
            "rows": compare_profiles(profiles, top)}


def profile_table(summary: dict) -> str:
    """A markdown table of a :func:`profile_summary`: per way each operator's self ms, share of the way's total and
    calls, and (two ways) the ratio of the second way's ms to the first's."""
    ways, totals = summary["ways"], summary["total_ms"]
    pair = len(ways) == 2
    header = ["operator", *(f"{w} ms (share, calls)" for w in ways), *([f"{ways[1]} / {ways[0]}"] if pair else [])]
    rows = []
    for row in summary["rows"]:
        cells = [f"`{row['op']}`"]
        for w in ways:
            share = row[w] / totals[w] if totals[w] else 0.0
            cells.append(f"{row[w]:.0f} ({100 * share:.1f} %, {row[f'{w}_calls']})")
        if pair:
            cells.append("—" if not row[ways[0]] else f"{row[ways[1]] / row[ways[0]]:.2f}")
        rows.append(cells)
    last = ["total", *(f"{totals[w]:.0f}" for w in ways), *([f"{totals[ways[1]] / totals[ways[0]]:.2f}"] if pair
                                                             else [])]
    return markdown_table(header, [*rows, last])
