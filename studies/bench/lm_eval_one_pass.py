"""Part of ``python -m studies bench lm-eval``: the methods of one run from one backbone pass vs one method at a time.

The benchmark's methods that can share the backbone pass (backbone, memory, kNN-LM;
:mod:`mlpmem.evaluation.one_pass`) score the same local tasks both ways, interleaved round by round: every method
through its own ``mlpmem`` model (shared contexts, the battery's path before one pass), and all of them through
one :class:`~mlpmem.evaluation.one_pass.OnePass` (its scores dropped before each round, so every round computes
them). A third way is the one pass with every context shared (``min_saved=0``: each context that two distinct
rows read runs once, every request on its cache), against the one pass's own plan (a context shared only when that
saves enough, every other request scored on its whole row, many rows a batch;
:mod:`mlpmem.evaluation.shared_context`). Reported: wall and CPU seconds of all the methods together each way,
the ratios, and the agreement per method with the one pass (largest difference of any request's log-likelihood;
equal greedy flags; equal accuracies and PMI accuracies).
"""

from __future__ import annotations

from lm_eval import simple_evaluate

from mlpmem.evaluation.harness import MlpmemLM
from mlpmem.evaluation.one_pass import ONE_PASS_METHODS, OnePass
from mlpmem.reporting.tables import markdown_table
from studies.bench.common import interleave, summarize

ONE, SEPARATE, ALL_SHARED = "one pass", "one method at a time", "one pass, every context shared"


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
    """The three ways over ``one_pass_labels(cfg.methods)`` (``responses``/``scores``: how lm-eval's output is
    read)."""
    labels = one_pass_labels(cfg.methods)
    args = {m: {} if m == "memory" else {"method": m} for m in labels}
    one = OnePass({m: {"run": cfg.run, **args[m]} for m in labels})
    shared = OnePass({m: {"run": cfg.run, **args[m]} for m in labels}, min_saved=0)
    alone = {m: MlpmemLM(run=cfg.run, batch_size=cfg.batch_size, **args[m]) for m in labels}
    seconds, last = timed_rounds(cfg, manager, {ONE: (one, one.models(cfg.batch_size)), SEPARATE: (None, alone),
                                                ALL_SHARED: (shared, shared.models(cfg.batch_size))})
    agree = {way: {m: _agreement(responses(last[ONE][m]), responses(last[way][m]), scores(last[ONE][m]),
                                 scores(last[way][m])) for m in labels} for way in (SEPARATE, ALL_SHARED)}
    return {"methods": labels, "backbone_passes_per_round": one.passes // (cfg.warmup + cfg.repeats),
            **speedups(seconds, SEPARATE, ONE), "agreement": agree[SEPARATE],
            "planned": {**speedups(seconds, ALL_SHARED, ONE), "agreement": agree[ALL_SHARED]}}


def _agreement(a: list, b: list, scores_a: dict, scores_b: dict) -> dict:
    return {"requests": len(b), "max_abs_loglik_diff": max(abs(x[0] - y[0]) for x, y in zip(a, b)),
            "greedy_equal": all(x[1] == y[1] for x, y in zip(a, b)), "scores_equal": scores_a == scores_b}


def _agreement_rows(agreement: dict) -> list[list]:
    return [[m, v["requests"], f"{v['max_abs_loglik_diff']:.2g}", "yes" if v["greedy_equal"] else "**no**",
             "yes" if v["scores_equal"] else "**no**"] for m, v in agreement.items()]


def one_pass_report(r: dict) -> str:
    s, planned = r["seconds"], r["planned"]
    shared = planned["seconds"][ALL_SHARED]
    head = ["method", "requests", "max abs Δ log-lik (one pass vs the other way)", "greedy flags equal",
            "acc and PMI equal"]
    return "\n".join([
        f"## {', '.join(r['methods'])} from one backbone pass", "",
        f"All {len(r['methods'])} methods scored through one pass: {s[ONE]['wall']['median']:.1f} s wall "
        f"({s[ONE]['cpu']['median']:.1f} s CPU); one method at a time (each with shared contexts): "
        f"{s[SEPARATE]['wall']['median']:.1f} s wall ({s[SEPARATE]['cpu']['median']:.1f} s CPU). "
        f"One method at a time / one pass: **{r['speedup_wall']:.2f}x** wall, {r['speedup_cpu']:.2f}x CPU "
        f"(medians of the same interleaved rounds).", "",
        markdown_table(head, _agreement_rows(r["agreement"])), "",
        "### The one pass's plan against every context shared", "",
        f"One pass with every context shared: {shared['wall']['median']:.1f} s wall ({shared['cpu']['median']:.1f} "
        f"s CPU). Every context shared / the plan (long shared contexts once, the rest as whole rows): "
        f"**{planned['speedup_wall']:.2f}x** wall, {planned['speedup_cpu']:.2f}x CPU.", "",
        markdown_table(head, _agreement_rows(planned["agreement"]))])
