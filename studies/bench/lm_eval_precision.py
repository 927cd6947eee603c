"""Part of ``python -m studies bench lm-eval --compare-precision bf16``: lm-eval scoring at fp32 and at bf16,
side by side.

The benchmark's methods that share a backbone pass (backbone, memory, kNN-LM; :mod:`mlpmem.evaluation.one_pass`)
score the same local tasks through one :class:`~mlpmem.evaluation.one_pass.OnePass` per precision (its scores
dropped before each round, so every round computes them), the two interleaved round by round. Reported: wall and
CPU seconds each way and their ratio; per method how far bf16 moves the scores (largest and mean absolute
difference of a request's log-likelihood, the share of items whose correctness by acc or by PMI changes, and the
paired difference bf16 − fp32 of the task-average acc and PMI with its 95 % interval); and for every method besides
the backbone its paired difference from the backbone at each precision, the figure the QA battery reports, so that
a reader sees whether a verdict would move.
"""

from __future__ import annotations

from mlpmem.evaluation.compare import AVERAGE, compare, per_item
from mlpmem.evaluation.one_pass import OnePass
from mlpmem.reporting.tables import markdown_table
from studies.bench.lm_eval_one_pass import one_pass_labels, one_round, speedups, timed_rounds
from studies.bench.op_profile import op_profile, profile_summary, profile_table

EXACT = "fp32"
PROFILE_ITEMS = 3
"""Items per task of the profiled round: the profiler keeps every operator call in memory (a whole round of the
battery's tasks takes more than 16 GiB)."""
METRIC_NAMES = {"acc": "acc", "acc_mutual_info": "PMI"}


def measure_precision(cfg, manager, responses) -> dict:
    """Both precisions over ``one_pass_labels(cfg.methods)`` (``responses``: how lm-eval's output is read)."""
    labels, low = one_pass_labels(cfg.methods), cfg.compare_precision
    args = {m: {} if m == "memory" else {"method": m} for m in labels}
    passes = {p: OnePass({m: {"run": cfg.run, "precision": p, **args[m]} for m in labels}) for p in (EXACT, low)}
    ways = {p: (one, one.models(cfg.batch_size)) for p, one in passes.items()}
    seconds, last = timed_rounds(cfg, manager, ways)
    out = {"methods": labels, "precision": low, **speedups(seconds, EXACT, low),
           "agreement": {m: agreement(last[EXACT][m], last[low][m], responses) for m in labels}}
    if cfg.profile:  # one more round each, untimed, under the profiler
        items = min(cfg.limit, PROFILE_ITEMS)
        rounds = {p: (lambda p=p: one_round(cfg, manager, *ways[p], {}, items)) for p in ways}
        out["profile"] = {**profile_summary({p: op_profile(go) for p, go in rounds.items()}), "items_per_task": items}
    if "backbone" in labels:
        out["vs_backbone"] = {m: {p: average_deltas(compare(last[p]["backbone"], last[p][m])) for p in passes}
                              for m in labels if m != "backbone"}
    return out


def agreement(exact: dict, low: dict, responses) -> dict:
    """How far ``low``'s lm-eval output is from ``exact``'s, for one method on the same requests."""
    a, b = responses(exact), responses(low)
    gaps = [abs(x[0] - y[0]) for x, y in zip(a, b)]
    items_a, items_b = per_item(exact), per_item(low)
    changed = {}
    for metric in METRIC_NAMES:
        pairs = [(items_a[t][k][metric], items_b[t][k][metric]) for t in items_a for k in items_a[t]
                 if metric in items_a[t][k] and metric in items_b.get(t, {}).get(k, {})]
        changed[metric] = {"items": len(pairs), "changed": sum(x != y for x, y in pairs)}
    return {"requests": len(a), "max_abs_loglik_diff": max(gaps), "mean_abs_loglik_diff": sum(gaps) / len(gaps),
            "items_changed": changed, "delta": average_deltas(compare(exact, low))}


def average_deltas(rows) -> dict:
    """``{metric: Interval.as_dict()}`` of the task-average rows (percent points)."""
    return {row.metric: row.delta.as_dict() for row in rows if row.task == AVERAGE and row.metric in METRIC_NAMES}


def _delta(d: dict) -> str:
    low, high = d["ci95"]
    return f"{d['estimate']:+.2f} [{low:+.2f}, {high:+.2f}]"


def precision_report(r: dict) -> str:
    low, s = r["precision"], r["seconds"]
    rows = []
    for m, v in r["agreement"].items():
        changed = [f"{c['changed']} of {c['items']}" for c in v["items_changed"].values()]
        rows.append([m, v["requests"], f"{v['max_abs_loglik_diff']:.3g}", f"{v['mean_abs_loglik_diff']:.3g}",
                     *changed, *(_delta(v["delta"][k]) if k in v["delta"] else "—" for k in METRIC_NAMES)])
    parts = [
        f"## {', '.join(r['methods'])} at fp32 and at {low}", "",
        f"One backbone pass per request at each precision. fp32: {s[EXACT]['wall']['median']:.1f} s wall "
        f"({s[EXACT]['cpu']['median']:.1f} s CPU); {low}: {s[low]['wall']['median']:.1f} s wall "
        f"({s[low]['cpu']['median']:.1f} s CPU). fp32 / {low}: **{r['speedup_wall']:.2f}x** wall, "
        f"{r['speedup_cpu']:.2f}x CPU (medians of the same interleaved rounds).", "",
        markdown_table(["method", "requests", "max abs Δ log-lik", "mean abs Δ log-lik", "items whose acc changed",
                        "items whose PMI changed", f"average acc, {low} − fp32 [95 % CI]",
                        f"average PMI, {low} − fp32 [95 % CI]"], rows)]
    if r.get("vs_backbone"):
        rows = [[m, METRIC_NAMES[k], _delta(d[EXACT][k]), _delta(d[low][k])]
                for m, d in r["vs_backbone"].items() for k in METRIC_NAMES if k in d[EXACT] and k in d[low]]
        parts += ["", "Each method vs the backbone (paired, task average, points), as the battery reports it:", "",
                  markdown_table(["method", "metric", "Δ vs backbone at fp32", f"Δ vs backbone at {low}"], rows)]
    if r.get("profile"):
        parts += ["", "### Where the time goes: one more round at each precision under `torch.profiler` "
                  f"({r['profile']['items_per_task']} items per task)", "",
                  "Self CPU time per operator (its own, without the operators it calls), the operators that take "
                  "the most time at either precision; the profiler's own overhead is in every call, so compare the "
                  "shares and the ratio, not the milliseconds, with the timed rounds.", "",
                  profile_table(r["profile"])]
    return "\n".join(parts)
