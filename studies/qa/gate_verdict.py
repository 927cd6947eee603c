"""Keep the learned gate, or the fixed λ: the gate's rule applied to what the QA suite measured.

The gated memory (``memory-gate``) is judged against the memory at its fixed λ (``memory``), paired item by item
with 95 % intervals, wherever both were scored: closed-book QA (EM, F1) on the test and on the control questions,
and every task of the lm-eval battery (acc, PMI), of HaluEval detection (acc) and of closed-book preference (acc,
acc norm), each family's average too. The rule, fixed before the measurement: **keep the gate only if it beats the
fixed λ somewhere that matters and is below it nowhere.** "Beats" is a paired measure above, or a lower perplexity
on the memory run's held-out text (the measure the gate is trained for; one run, a point estimate); "below" is any
paired measure below. Otherwise the fixed λ stays the default. Many measures are judged at 95 % each, so an isolated
verdict either way can be chance: the section lists every one that is not "not distinguishable".
"""

from __future__ import annotations

from dataclasses import dataclass

from mlpmem.evaluation.compare import LABELS, Row
from mlpmem.evaluation.stats import ABOVE, BELOW, BootstrapConfig, Interval
from studies.qa.battery import battery_results
from studies.qa.battery_report import task_rows
from studies.qa.hallucination import family_rows
from studies.qa.intervals import QA_METRICS, SPLITS, compare_scored, split_task

GATE, FIXED = "memory-gate", "memory"
FAMILY_METRICS = {"battery": ("acc", "acc_mutual_info"), "detect": ("acc",), "prefer": ("acc", "acc_norm")}
"""The metrics the report judges in each family of lm-eval tasks (:mod:`studies.qa.hallucination`)."""
FAMILY_NAMES = {"qa": "closed-book QA", "battery": "battery", "detect": "HaluEval detection",
                "prefer": "closed-book preference"}


@dataclass(frozen=True)
class Judged:
    """One measure where the gate and the fixed λ were both scored: their scores and the gate's paired Δ."""

    family: str
    task: str
    metric: str
    fixed: Interval
    gate: Interval
    delta: Interval

    @property
    def verdict(self) -> str:
        return ABOVE if self.delta.low > 0 else BELOW if self.delta.high < 0 else "same"


def judged_measures(results: dict, cfg: BootstrapConfig) -> list[Judged]:
    """Every paired measure of the gate against the fixed λ the suite's results hold (empty: no gate scored)."""
    out = []
    for bench, b in results["benchmarks"].items():
        gate, fixed = b["methods"].get(GATE), b["methods"].get(FIXED)
        if gate is None or fixed is None:
            continue
        for split in SPLITS:
            for metric in QA_METRICS:
                c = compare_scored(split_task(bench, split), metric, fixed.get(split), gate.get(split), cfg)
                if c.delta is not None:
                    out.append(Judged("qa", c.task, metric, c.base, c.method, c.delta))
    stage = results.get("battery") or {}
    if GATE in (stage.get("methods") or {}) and FIXED in stage["methods"]:
        rows = family_rows(battery_results(stage, FIXED), {GATE: battery_results(stage, GATE)}, cfg)
        for family, metrics in FAMILY_METRICS.items():
            out += [Judged(family, r.task, r.metric, r.base, r.method, r.delta)
                    for r in rows.get(family, {}).get(GATE, []) if r.metric in metrics]
    return out


def judged_text_ppl(method: dict) -> dict | None:
    """A memory-gate result's perplexities on its run's held-out text (``gate_text_ppl``, the run's text gate as
    trained) when they are the gate it was scored with: trained on the text, neither offset nor floor; else None."""
    as_trained = method.get("gate_training", "text") == "text" and not method.get("gate_offset") \
        and not method.get("gate_floor")
    return method.get("gate_text_ppl") if as_trained else None


def text_perplexity(results: dict) -> list[dict]:
    """Each benchmark's judged gate on its memory run's held-out text (:func:`judged_text_ppl`):
    ``{"benchmark", "ppl_gate", "ppl_fixed"}``."""
    out = []
    for bench, b in results["benchmarks"].items():
        g = judged_text_ppl(b["methods"].get(GATE) or {})
        if g:
            out.append({"benchmark": bench, "ppl_gate": g["ppl_gate"], "ppl_fixed": g["ppl_fixed"]})
    return out


def gate_verdict(results: dict, cfg: BootstrapConfig) -> dict | None:
    """The rule's outcome: ``keep``, what the gate beats the fixed λ on (``above``: paired measures, then
    perplexities), where it is below (``below``), how many measures were judged per family, every measure that
    separates the two (``separating``) and the held-out text perplexities. None without a gate scored beside the
    fixed λ."""
    judged = judged_measures(results, cfg)
    if not judged:
        return None
    ppl = text_perplexity(results)
    above = [_name(j) for j in judged if j.verdict == ABOVE] + [f"{p['benchmark']} held-out text perplexity"
                                                                for p in ppl if p["ppl_gate"] < p["ppl_fixed"]]
    below = [_name(j) for j in judged if j.verdict == BELOW]
    counts: dict[str, int] = {}
    for j in judged:
        counts[j.family] = counts.get(j.family, 0) + 1
    separating = [{"family": j.family, "task": j.task, "metric": j.metric, "n": j.delta.n,
                   "fixed": j.fixed.estimate, "gate": j.gate.estimate, "fixed_stderr": j.fixed.stderr,
                   "gate_stderr": j.gate.stderr, "delta": j.delta.estimate, "ci95": [j.delta.low, j.delta.high],
                   "verdict": j.verdict} for j in judged if j.verdict != "same"]
    return {"keep": bool(above) and not below, "above": above, "below": below, "measures": counts,
            "separating": separating, "perplexity": ppl}


def _name(j: Judged) -> str:
    return f"{FAMILY_NAMES[j.family]}: {j.task} {LABELS.get(j.metric, j.metric)}"


def _backbone_regressions(families: dict[str, dict[str, list[Row]]], method: str) -> int:
    """Task metrics of the battery where ``method`` is below the backbone by its paired interval."""
    rows = task_rows((families.get("battery") or {}).get(method, []))
    return sum(r.verdict == BELOW for r in rows if r.metric in FAMILY_METRICS["battery"])


def gate_section(verdict: dict | None, families: dict[str, dict[str, list[Row]]], labels: dict[str, str]) -> str:
    """The rule, every measure that separates the gate from the fixed λ, and the verdict (``verdict``:
    :func:`gate_verdict`'s)."""
    if verdict is None:
        return "(the gate was not scored beside the fixed λ)"
    counts = ", ".join(f"{FAMILY_NAMES[f]} {n}" for f, n in verdict["measures"].items())
    lines = [f"{labels[GATE]} against {labels[FIXED]} (the fixed λ), paired item by item wherever both were scored "
             f"({counts} measures, each family's average included). The rule (`studies.qa.gate_verdict`): keep the "
             "gate only if it beats the fixed λ somewhere that matters (a paired measure above, or a lower "
             "perplexity on the memory run's held-out text) and is below it nowhere; otherwise the fixed λ stays "
             "the default. At 95 % per measure an isolated verdict can be chance.", ""]
    if verdict["separating"]:
        lines += ["| family | task | metric | n | fixed λ | gate | Δ gate − fixed [95 % CI] |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {FAMILY_NAMES[s['family']]} | {s['task']} | {LABELS.get(s['metric'], s['metric'])} | {s['n']} | "
                  f"{s['fixed']:.1f} ± {s['fixed_stderr']:.1f} | {s['gate']:.1f} ± {s['gate_stderr']:.1f} | "
                  f"{s['delta']:+.1f} [{s['ci95'][0]:+.1f}, {s['ci95'][1]:+.1f}] ({s['verdict']}) |"
                  for s in verdict["separating"]]
    else:
        lines.append("No paired measure separates the gate from the fixed λ.")
    lines += [""] + [f"Held-out text of {p['benchmark']}'s memory run: perplexity {p['ppl_gate']:.3f} with the gate, "
                     f"{p['ppl_fixed']:.3f} at the fixed λ." for p in verdict["perplexity"]]
    if families.get("battery"):
        lines.append(f"Battery task metrics below the backbone by their interval: {labels[GATE]} "
                     f"{_backbone_regressions(families, GATE)}, {labels[FIXED]} "
                     f"{_backbone_regressions(families, FIXED)}.")
    keep = ("**Verdict: keep the gate** (it beats the fixed λ on " + "; ".join(verdict["above"])
            + " and is below it nowhere)." if verdict["keep"] else
            "**Verdict: the fixed λ stays the default**: the gate "
            + (f"is below the fixed λ on {'; '.join(verdict['below'])}" if verdict["below"] else
               "beats it nowhere that matters") + ".")
    return "\n".join([*lines, "", keep])
