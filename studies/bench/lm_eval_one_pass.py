"""Part of ``python -m studies bench lm-eval``: the methods of one run from one backbone pass vs one method at a time.

The benchmark's methods that can share the backbone pass (backbone, memory, kNN-LM;
:mod:`mlpmem.evaluation.one_pass`) score the same local tasks both ways, interleaved round by round: every method
through its own ``mlpmem`` model (shared contexts, the battery's path before one pass), and all of them through
one :class:`~mlpmem.evaluation.one_pass.OnePass` (its scores dropped before each round, so every round computes
them). Reported: wall and CPU seconds of all the methods together each way, their ratio, and the agreement per
method (largest difference of any request's log-likelihood; equal greedy flags; equal accuracies and PMI
accuracies).
"""

from __future__ import annotations

from lm_eval import simple_evaluate

from mlpmem.evaluation.harness import MlpmemLM
from mlpmem.evaluation.one_pass import ONE_PASS_METHODS, OnePass
from mlpmem.reporting.tables import markdown_table
from studies.bench.common import interleave, summarize

ONE, SEPARATE = "one pass", "one method at a time"


def one_pass_labels(methods: list[str]) -> list[str]:
    """The benchmark's methods that share a pass (the comparison needs two or more)."""
    return [m for m in methods if m in ONE_PASS_METHODS]


def one_round(cfg, manager, one: OnePass | None, models: dict, last: dict, limit: int | None = None) -> None:
    """``cfg.tasks`` scored once by each of ``models`` (``{method: lm-eval model}``; a one pass's scores dropped
    first, so that the round computes them), each method's lm-eval output into ``last``; ``limit`` items per task
    (default ``cfg.limit``)."""
    if one is not None:
        one.scores.clear()
    for m, lm in models.items():
        last[m] = simple_evaluate(model=lm, tasks=cfg.tasks, task_manager=manager, limit=limit or cfg.limit,
                                  log_samples=True)


def timed_rounds(cfg, manager, ways: dict[str, tuple[OnePass | None, dict]]) -> tuple[dict, dict]:
    """Each way's models ``(one pass or None, {method: lm-eval model})`` scoring ``cfg.tasks`` (:func:`one_round`),
    the ways interleaved round by round: ``(seconds per way, {way: {method: lm-eval output of the last round}})``."""
    last: dict[str, dict] = {name: {} for name in ways}
    rounds = {name: (lambda n=name: one_round(cfg, manager, *ways[n], last[n])) for name in ways}
    return interleave(rounds, cfg.warmup, cfg.repeats), last


def speedups(seconds: dict, slow: str, fast: str) -> dict:
    """``{"speedup_wall", "speedup_cpu"}``: the ratio of the medians of way ``slow`` to way ``fast``, and the
    seconds summarised."""
    median = {clock: {name: summarize(seconds[name][clock])["median"] for name in (slow, fast)}
              for clock in ("wall", "cpu")}
    return {"seconds": {name: {clock: summarize(s) for clock, s in times.items()} for name, times in seconds.items()},
            "speedup_wall": median["wall"][slow] / median["wall"][fast],
            "speedup_cpu": median["cpu"][slow] / median["cpu"][fast]}


def measure_one_pass(cfg, manager, responses, scores) -> dict:
    """Both ways over ``one_pass_labels(cfg.methods)`` (``responses``/``scores``: how lm-eval's output is read)."""
    labels = one_pass_labels(cfg.methods)
    args = {m: {} if m == "memory" else {"method": m} for m in labels}
    one = OnePass({m: {"run": cfg.run, **args[m]} for m in labels})
    alone = {m: MlpmemLM(run=cfg.run, batch_size=cfg.batch_size, **args[m]) for m in labels}
    seconds, last = timed_rounds(cfg, manager, {ONE: (one, one.models(cfg.batch_size)), SEPARATE: (None, alone)})
    agree = {}
    for m in labels:
        a, b = responses(last[ONE][m]), responses(last[SEPARATE][m])
        agree[m] = {"requests": len(b), "max_abs_loglik_diff": max(abs(x[0] - y[0]) for x, y in zip(a, b)),
                    "greedy_equal": all(x[1] == y[1] for x, y in zip(a, b)),
                    "scores_equal": scores(last[ONE][m]) == scores(last[SEPARATE][m])}
    return {"methods": labels, "backbone_passes_per_round": one.passes // (cfg.warmup + cfg.repeats),
            **speedups(seconds, SEPARATE, ONE), "agreement": agree}


def one_pass_report(r: dict) -> str:
    s = r["seconds"]
    rows = [[m, v["requests"], f"{v['max_abs_loglik_diff']:.2g}", "yes" if v["greedy_equal"] else "**no**",
             "yes" if v["scores_equal"] else "**no**"] for m, v in r["agreement"].items()]
    return "\n".join([
        f"## {', '.join(r['methods'])} from one backbone pass", "",
        f"All {len(r['methods'])} methods scored through one pass: {s[ONE]['wall']['median']:.1f} s wall "
        f"({s[ONE]['cpu']['median']:.1f} s CPU); one method at a time (each with shared contexts): "
        f"{s[SEPARATE]['wall']['median']:.1f} s wall ({s[SEPARATE]['cpu']['median']:.1f} s CPU). "
        f"One method at a time / one pass: **{r['speedup_wall']:.2f}x** wall, {r['speedup_cpu']:.2f}x CPU "
        f"(medians of the same interleaved rounds).", "",
        markdown_table(["method", "requests", "max abs Δ log-lik (one pass vs alone)", "greedy flags equal",
                        "acc and PMI equal"], rows)])
