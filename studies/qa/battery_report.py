"""The battery's part of the QA report: every method against the backbone on the lm-eval battery, item by item.

Read from the files the battery stage wrote (:mod:`studies.qa.battery`; ``results["battery"]``),
compared with :func:`mlpmem.evaluation.compare.compare` (per task and metric the two scores, the paired
difference with its 95 % interval and a verdict; the average over tasks), drawn with its plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from mlpmem.evaluation.compare import AVERAGE, LABELS, Row, plot_deltas, table
from mlpmem.evaluation.stats import BELOW, BootstrapConfig
from studies.qa.battery import battery_results
from studies.qa.choice_shift import Shift, length_shift, shift_table, shorter_target_share
from studies.qa.hallucination import family_rows, task_family

FIGURE = "battery-delta.png"


class BatteryView(NamedTuple):
    """What the report reads from the battery's files."""

    families: dict[str, dict[str, list[Row]]]
    """``{family: {method: rows}}``: every method against the backbone, per task family."""
    shifts: dict[str, dict[str, dict[str, Shift]]]
    """``{family: {method: {task: Shift}}}``: where its log-likelihood choices moved, toward shorter or longer."""
    shorter_right: dict[str, float]
    """``{task: percent}`` of the preference tasks' items whose right answer is the shorter choice."""


def battery_rows(results: dict, cfg: BootstrapConfig) -> BatteryView:
    """Every scored method against the backbone, the tasks sorted into the no-regression battery, HaluEval
    detection and preference (:func:`~studies.qa.hallucination.task_family`); empty when the battery did not run."""
    battery = results.get("battery")
    if not battery:
        return BatteryView({}, {}, {})
    base = battery_results(battery, "backbone")
    methods = {m: battery_results(battery, m) for m in battery["methods"] if m != "backbone"}
    shifts: dict[str, dict[str, dict[str, Shift]]] = {}
    for m, mine in methods.items():
        for t, shift in length_shift(base, mine).items():
            shifts.setdefault(task_family(t), {}).setdefault(m, {})[t] = shift
    prefer = [t for t in base["samples"] if task_family(t) == "prefer"]
    return BatteryView(family_rows(base, methods, cfg), shifts, shorter_target_share(base, prefer))


def battery_section(rows: dict[str, list[Row]], labels: dict[str, str], docs: Path, stage: dict | None = None,
                    shifts: dict[str, dict[str, Shift]] | None = None) -> str:
    """The table (scores ± standard error, Δ vs backbone with its 95 % interval, verdict), the Δ plot, where the
    log-likelihood choices moved and, from what the stage recorded (``stage``: :func:`~studies.qa.battery.
    collect_battery`'s), the precision, each method's scoring time and RAG's contexts without passages."""
    if not rows and not stage:
        return "(not run: the suite config has no `battery` section, or `--no-battery` skipped it)"
    stage = stage or {}
    how = precision_line(stage.get("precision") or {}, labels) + rag_line(stage.get("rag_contexts") or {}, labels)
    times = scoring_times(stage.get("wall_seconds") or {}, labels, stage.get("one_pass") or [],
                          stage.get("more_tasks") or [])
    if not rows:
        return ("(not asked: `battery.tasks` holds no task of the no-regression battery; the stage scored the "
                f"hallucination tasks below.) {how}\n\n{times}")
    named = {labels.get(m, m): r for m, r in rows.items()}
    figure = plot_deltas({m: task_rows(rs) for m, rs in named.items()}, docs / FIGURE, "backbone")
    return "\n".join([
        "lm-evaluation-harness (`mlpmem` model type) on the local tasks of `python -m studies tasks prepare` "
        "(docs/lm-eval.md), the models of the no-regression benchmark, the memory and kNN-LM at the λ their run "
        "chose on validation perplexity; acc: log-likelihood choice, PMI: lm-eval's `acc_mutual_info` "
        "(domain-conditional PMI), acc (norm): the log-likelihood "
        "divided by the choice's length in bytes. Every difference is paired over the items "
        f"both scored; `average` weighs every task the same. {how}", "",
        table(named, "backbone"), "", f"![battery Δ vs backbone]({figure.name})", "",
        shift_section(shifts or {}, labels), "", times])


def rag_line(counts: dict[str, dict[str, int]], labels: dict[str, str]) -> str:
    """One sentence: of each RAG method's distinct contexts, how many were too long to take a passage."""
    if not counts:
        return ""
    parts = [f"{labels.get(m, m)} {c['without_passages']} of {c['contexts']}" for m, c in counts.items()]
    return (" RAG puts its passages before each context under `rag.max_prompt_tokens`; contexts longer than that "
            "by themselves get none and are scored as the backbone scores them: " + ", ".join(parts)
            + " distinct contexts.")


def shift_section(shifts: dict[str, dict[str, Shift]], labels: dict[str, str]) -> str:
    """Where each method's log-likelihood choice differs from the backbone's, whether it took a shorter choice."""
    if not shifts:
        return ""
    return "\n".join([
        "Items whose log-likelihood choice (acc) differs from the backbone's, and whether the method's choice is "
        "shorter or longer in characters: a mixture lowers every token the memory gives no mass by log(1 − λ), so "
        "by acc it favours short choices; PMI divides that out (`studies.qa.choice_shift`).", "",
        shift_table({labels.get(m, m): s for m, s in shifts.items()}, "backbone")])


def precision_line(precision: dict[str, str], labels: dict[str, str]) -> str:
    """One sentence: the precision every method was scored at (``battery.precision``), or each one's if they differ."""
    kinds = set(precision.values()) or {"fp32"}
    if len(kinds) == 1:
        return "Every method scored " + {"fp32": "at fp32.", "bf16": "at bf16 (autocast, `battery.precision`)."}[
            kinds.pop()]
    return ("Scored at different precisions (files of earlier settings): "
            + ", ".join(f"{labels.get(m, m)} {p}" for m, p in precision.items()) + ".")


def scoring_times(seconds: dict[str, float | None], labels: dict[str, str], one_pass: list[str] = (),
                  more_tasks: list[str] = ()) -> str:
    """One line: lm-eval's wall time per method (— for files scored before it was recorded); the methods scored
    from one backbone pass named, the first of which carries the time of all; those whose file was scored on tasks
    this report does not show (an earlier call asked for more) named."""
    if not seconds:
        return ""
    parts = [f"{labels.get(m, m)} {'—' if s is None else f'{s / 60:.0f} min'}" for m, s in seconds.items()]
    shared = ("" if len(one_pass) < 2 else f" {', '.join(labels.get(m, m) for m in one_pass)} were scored from one "
              "backbone pass (`battery.one_pass`): the first of them carries the time of all")
    more = ("" if not more_tasks else f" The files of {', '.join(labels.get(m, m) for m in more_tasks)} were scored "
            "on more tasks than this report shows (an earlier call asked for them); their times count those too.")
    return ("Scoring time (the battery stage's wall time per method, on the machine that ran it; — : scored before "
            f"it was recorded): {', '.join(parts)}.{shared}" + ("." if shared else "") + more)


def task_rows(rows: list[Row]) -> list[Row]:
    """The per-task rows (without the average)."""
    return [r for r in rows if r.task != AVERAGE]


def worst(rows: list[Row]) -> Row:
    return min(task_rows(rows), key=lambda r: r.delta.estimate)


def describe_row(r: Row) -> str:
    d = r.delta
    return (f"{r.task} {LABELS[r.metric]} {r.method.estimate:.1f} vs {r.base.estimate:.1f}, Δ {d.estimate:+.1f} "
            f"[{d.low:+.1f}, {d.high:+.1f}] ({r.verdict})")


def any_below(rows: list[Row]) -> bool:
    return any(r.verdict == BELOW for r in task_rows(rows))


def task_sources(stage: dict | None) -> dict[str, str]:
    """``{task: source}``: where each scored task's data comes from (package, version and file), as its task YAML's
    ``metadata.source`` recorded it in the backbone's battery file ({} when the battery did not run)."""
    if not stage:
        return {}
    configs = battery_results(stage, "backbone").get("configs") or {}
    return {task: c["metadata"]["source"] for task, c in sorted(configs.items())
            if isinstance(c.get("metadata"), dict) and "source" in c["metadata"]}
