"""The rows of the maintenance table (issue 18) from the update study's scores, and its report.

One key per row of the table, each with its measured ``value``, the ``target`` and whether it is met (``pass``),
plus what the value is made of. QA values are multiple-choice accuracy in percent
(:class:`studies.update.scoring.Scorer`); exact match of generated answers sits beside them (``em``).
"""

from __future__ import annotations

import math
from pathlib import Path

from mlpmem.evaluation.stats import paired_difference, unpaired_difference, verdict
from mlpmem.reporting.tables import DASH, markdown_table
from mlpmem.utils.shards import write_json
from studies.update.groups import DOCUMENT
from studies.update.seeds import recipe_means, retrained_spread
from studies.update.variants import step as variant_step

STEPS = ("before", "updated", "retrained", "forgotten")


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _em(scores: dict, pairs: dict[str, tuple[str, str]]) -> dict:
    return {name: scores[step][group].get("em") for name, (step, group) in pairs.items()}


def _paired(scores: dict, before: tuple[str, str], after: tuple[str, str], paired: bool = True) -> dict | None:
    """after − before in points of multiple-choice accuracy, with its 95 % interval (seeded bootstrap: paired on
    the same questions, or with ``paired=False`` two groups of questions resampled apart) and verdict; None when
    the per-question scores are not there."""
    a, b = scores[before[0]][before[1]].get("correct"), scores[after[0]][after[1]].get("correct")
    if not a or not b or (paired and len(a) != len(b)):
        return None
    d = (paired_difference if paired else unpaired_difference)([100.0 * x for x in a], [100.0 * x for x in b])
    return {"delta": round(d.estimate, 2), "ci95": [round(d.low, 2), round(d.high, 2)], "n": d.n,
            "verdict": verdict(d)}


def _row(measure: str, value: float | None, target: str, ok: bool, **parts) -> dict:
    return {"measure": measure, "value": None if value is None else round(value, 4), "target": target,
            "pass": bool(ok), **parts}


def table_rows(scores: dict, timings: dict, explained: dict, cfg) -> dict:
    """The six rows of the table (see the module docstring)."""
    s = lambda step, group: scores[step][group]["choice"]  # noqa: E731
    added = ratio(s("updated", "arriving"), s("retrained", "arriving"))
    spread = retrained_spread(scores)
    old = ratio(s("updated", "old"), s("before", "old"))
    cost = ratio(timings["update_s"], timings["retrain_s"])
    held, n_held = s("forgotten", "held_out"), scores["forgotten"]["held_out"]["n"]
    margin = 2 * 100 * math.sqrt(max(held, 1.0) / 100 * (1 - min(held, 99.0) / 100) / max(1, n_held))
    kept = ratio(s("forgotten", "kept"), s("updated", "kept"))
    rate = explained["rate"]
    return {
        "qa_added_update_vs_retrain": _row(
            "QA on the added entities after update, vs a memory retrained from scratch", added, ">= 0.90",
            added is not None and added >= 0.90, update=s("updated", "arriving"), retrained=s("retrained", "arriving"),
            delta_points=_paired(scores, ("retrained", "arriving"), ("updated", "arriving")),
            vs_retrained_mean=spread and ratio(s("updated", "arriving"), spread["mean"]),
            em=_em(scores, {"update": ("updated", "arriving"), "retrained": ("retrained", "arriving")})),
        "qa_old_after_update_vs_before": _row(
            "QA on the old entities after update, vs before", old, ">= 0.95", old is not None and old >= 0.95,
            before=s("before", "old"), after=s("updated", "old"),
            delta_points=_paired(scores, ("before", "old"), ("updated", "old")),
            em=_em(scores, {"before": ("before", "old"), "after": ("updated", "old")})),
        "cost_update_vs_retrain": _row(
            "wall time of update vs retraining from scratch", cost, "<= 0.25", cost is not None and cost <= 0.25,
            update_s=round(timings["update_s"], 2), retrain_s=round(timings["retrain_s"], 2),
            retrain_core_s=round(timings["retrain_core_s"], 2),
            core_ratio=ratio(timings["update_s"], timings["retrain_core_s"])),
        "qa_forgotten_after_forget": _row(
            "QA on the forgotten entities after forget (held-out entities: chance)", s("forgotten", "forgotten"),
            "<= held-out level (+2 standard errors)", s("forgotten", "forgotten") <= held + margin,
            before=s("updated", "forgotten"), held_out=held, chance=100 / (1 + cfg.distractors),
            vs_held_out=_paired(scores, ("forgotten", "held_out"), ("forgotten", "forgotten"), paired=False),
            vs_unseen=_paired(scores, ("before", "arriving"), ("forgotten", "forgotten"), paired=False),
            em=_em(scores, {"before": ("updated", "forgotten"), "after": ("forgotten", "forgotten"),
                            "held_out": ("forgotten", "held_out")}), document_form=_document_form(scores)),
        "qa_kept_after_forget": _row(
            "QA on the other entities after forget, vs before", kept, ">= 0.95", kept is not None and kept >= 0.95,
            before=s("updated", "kept"), after=s("forgotten", "kept"),
            delta_points=_paired(scores, ("updated", "kept"), ("forgotten", "kept")),
            em=_em(scores, {"before": ("updated", "kept"), "after": ("forgotten", "kept")})),
        "explain_top_document_is_own": _row(
            "explain: the first source in context of the answer is the entity's own document, among correctly "
            "answered questions", rate, ">= 0.90", rate is not None and rate >= 0.90, own=explained["own"],
            asked=explained["asked"], neighbour_rate=explained.get("neighbour_rate")),
    }


def _document_form(scores: dict) -> dict | None:
    """The forgotten entities asked in the words of their own documents (the positions the forget teaches) before
    and after the forget, against the held-out entities asked the same way; None when the study did not ask."""
    forgotten, held = f"forgotten{DOCUMENT}", f"held_out{DOCUMENT}"
    if forgotten not in scores["forgotten"]:
        return None
    return {"before": scores["updated"][forgotten]["choice"], "after": scores["forgotten"][forgotten]["choice"],
            "held_out": scores["forgotten"][held]["choice"],
            "vs_held_out": _paired(scores, ("forgotten", held), ("forgotten", forgotten), paired=False)}


def variant_rows(scores: dict, timings: dict, variants: dict) -> dict:
    """Per update variant, the study's update rows: added entities vs the retrained memory, old entities vs before
    the update (ratios, and paired differences in points), wall time vs retraining."""
    s = lambda at, group: scores[at][group]["choice"]  # noqa: E731
    spread, out = retrained_spread(scores), {}
    for name, v in variants.items():
        at = variant_step(name)
        out[name] = {"overrides": v["overrides"], "update_s": round(v["seconds"], 2),
                     "added": ratio(s(at, "arriving"), s("retrained", "arriving")), "arriving": s(at, "arriving"),
                     "added_delta_points": _paired(scores, ("retrained", "arriving"), (at, "arriving")),
                     "added_vs_retrained_mean": spread and ratio(s(at, "arriving"), spread["mean"]),
                     "old": ratio(s(at, "old"), s("before", "old")), "old_choice": s(at, "old"),
                     "old_delta_points": _paired(scores, ("before", "old"), (at, "old")),
                     "cost": ratio(v["seconds"], timings["retrain_s"])}
    return out


def seed_details(scores: dict, variants: dict) -> dict:
    """The retrained memories' spread over seeds and each seeded recipe's means (:mod:`.seeds`), for
    ``details``; empty without either."""
    spread, recipes = retrained_spread(scores), recipe_means(variants)
    return {**({"retrained_spread": spread} if spread else {}), **({"recipes": recipes} if recipes else {})}


def _mean_cell(stat: dict | None) -> str:
    if stat is None:
        return DASH
    return f"{stat['mean']:.3f}" + ("" if stat["sd"] is None else f" (sd {stat['sd']:.3f})")


def _seed_section(details: dict) -> str:
    """The retrained memories over seeds and the recipes' means over their seeds ("" without either)."""
    text, spread, recipes = "", details.get("retrained_spread"), details.get("recipes")
    if spread:
        rows = [[step, f"{value:.1f}"] for step, value in spread["arriving"].items()]
        text += ("## The retrained memory at other training seeds\n\nThe memory retrained from scratch again at "
                 "other training seeds, on the same datastore and teacher (`retrain_seeds`), scored on the "
                 f"arriving entities:\n\n{markdown_table(['memory', 'arriving (multiple choice %)'], rows)}\n\n"
                 f"Mean {spread['mean']:.1f} %, standard deviation {spread['sd']:.1f} points over {spread['n']} "
                 "seeds; `added vs retrained mean` divides an update's arriving entities by this mean.\n\n")
    if recipes:
        rows = [[name, ", ".join(map(str, r["seeds"])), _mean_cell(r.get("added")),
                 _mean_cell(r.get("added_vs_retrained_mean")), _mean_cell(r.get("old")), _mean_cell(r.get("cost"))]
                for name, r in recipes.items()]
        header = ["recipe", "maintenance seeds", "added vs retrained", "added vs retrained mean", "old kept",
                  "wall time vs retrain"]
        text += ("## Recipes over their seeds\n\nEach recipe's update rows averaged over the maintenance seeds it "
                 f"ran at (`update_seeds`), standard deviation in brackets:\n\n{markdown_table(header, rows)}\n\n")
    return text


def without_answers(scores: dict) -> dict:
    """``scores`` without the per-question ``correct`` lists (what results.json keeps)."""
    return {step: {g: {k: v for k, v in s.items() if k != "correct"} for g, s in by.items()}
            for step, by in scores.items()}


def _delta(d: dict | None) -> str:
    return DASH if not d else f"{d['delta']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


VARIANT_HEADER = ["update", "overrides", "added vs retrained", "Δ points [95 % CI]", "old kept",
                  "Δ points [95 % CI]", "wall time vs retrain"]
VARIANT_TARGETS = "Targets as in the study's table: added >= 0.90, old kept >= 0.95, wall time <= 0.25."


def _variant_cells(variants: dict) -> list[list[str]]:
    return [[name, ", ".join(v["overrides"]), _cell(v["added"]), _delta(v["added_delta_points"]), _cell(v["old"]),
             _delta(v["old_delta_points"]), _cell(v["cost"])] for name, v in variants.items()]


def _variant_table(results: dict) -> str:
    """The study's own update and every variant, side by side ("" without variants)."""
    variants = results["details"].get("variants")
    if not variants:
        return ""
    added, old, cost = (results[k] for k in ("qa_added_update_vs_retrain", "qa_old_after_update_vs_before",
                                             "cost_update_vs_retrain"))
    rows = [["the study's update", ", ".join(results["details"]["config"]["maintenance"]) or DASH,
             _cell(added["value"]), _delta(added.get("delta_points")), _cell(old["value"]),
             _delta(old.get("delta_points")), _cell(cost["value"])], *_variant_cells(variants)]
    return ("## Update variants (each on a copy of the first run, the same retrained memory)\n\n"
            "Each variant's overrides apply after the study's `maintenance`.\n\n" +
            markdown_table(VARIANT_HEADER, rows) + f"\n\n{VARIANT_TARGETS}\n\n")


def write_sweep_report(out: Path, results: dict) -> None:
    """``out/results.json`` and ``out/report.md`` of a study run with ``from_study`` (its variants only)."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    details = results["details"]
    cfg, source = details["config"], details["from_study"]
    base = ", ".join(cfg["maintenance"]) or "the maintenance defaults"
    text = (f"# Update recipes on the first run of `{source}`\n\n"
            f"Written by `python -m studies update-study` with `from_study`: each recipe updates a copy of that "
            f"study's first "
            f"run (`runs/first`) with the same arriving documents ({base}, then the overrides below) and is "
            f"compared with that study's retrained memory and with the first run before the update, all scored "
            f"again on the same questions (multiple choice among {1 + cfg['distractors']} values, memory mixed at "
            f"λ = {cfg['lam']}). Wall time is divided by the retraining measured in `{source}` "
            f"({details['timings']['retrain_s']:.1f} s; same data, another process).\n\n"
            f"{markdown_table(VARIANT_HEADER, _variant_cells(results['variants']))}\n\n{VARIANT_TARGETS}\n\n"
            f"{_seed_section(details)}"
            f"## QA per group and step (multiple choice %)\n\n{_score_table(details['scores'], ())}\n")
    (out / "report.md").write_text(text)


def _cell(value) -> str:
    return DASH if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def _score_table(scores: dict, steps: tuple[str, ...] = STEPS) -> str:
    """Multiple choice (/ EM) per group at ``steps`` and at every other step of ``scores`` (variants)."""
    steps = (*steps, *(k for k in scores if k not in steps))
    groups = sorted({g for by in scores.values() for g in by})
    rows = []
    for group in groups:
        row = [group]
        for step in steps:
            s = scores.get(step, {}).get(group)
            row.append(DASH if s is None else f"{s['choice']:.1f}" + ("" if s.get("em") is None else
                                                                      f" / {s['em']:.1f}"))
        rows.append(row)
    return markdown_table(["entities", *steps], rows)


def _notes(results: dict) -> str:
    """The paired intervals of the added and retention rows and the neighbour-only explain rate, as sentences."""
    lines = []
    for key, what in (("qa_added_update_vs_retrain", "added entities, updated − retrained memory"),
                      ("qa_old_after_update_vs_before", "old entities, after update − before"),
                      ("qa_kept_after_forget", "other entities, after forget − before")):
        d = results[key].get("delta_points")
        if d:
            lines.append(f"- {what}: {d['delta']:+.1f} points of multiple-choice accuracy, 95 % paired interval "
                         f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}] over {d['n']} questions: {d['verdict']}.")
    forgotten = results["qa_forgotten_after_forget"]
    for key, base in (("vs_held_out", "the held-out entities after the forget"),
                      ("vs_unseen", "the arriving entities before the memory saw them")):
        d = forgotten.get(key)
        if d:
            lines.append(f"- forgotten entities after forget − {base}: {d['delta']:+.1f} points, 95 % interval "
                         f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}] (two groups of questions resampled apart; "
                         f"base: {base}): {d['verdict']}.")
    doc = forgotten.get("document_form")
    if doc and doc["vs_held_out"]:
        d = doc["vs_held_out"]
        lines.append(f"- asked in the words of their own documents (the positions the forget teaches), the forgotten "
                     f"entities read {doc['before']:.1f} % before the forget and {doc['after']:.1f} % after, the "
                     f"held-out entities {doc['held_out']:.1f} %: {d['delta']:+.1f} points, 95 % interval "
                     f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]: {d['verdict']}.")
    row = results["explain_top_document_is_own"]
    if row.get("neighbour_rate") is not None:
        lines.append(f"- explain: the document best supported by the answer position's own neighbours (without the "
                     f"context) is the entity's own for {row['neighbour_rate']:.3f} of the same questions: "
                     "a question's key finds positions by the question's form, shared by every entity.")
    return "".join(line + "\n" for line in lines) + ("\n" if lines else "")


def write_report(out: Path, results: dict) -> None:
    """``out/results.json`` and ``out/report.md``."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    details = results["details"]
    table = markdown_table(["measure", "value", "target", "met"],
                           [[r["measure"], _cell(r["value"]), r["target"], "yes" if r["pass"] else "**no**"]
                            for k, r in results.items() if k != "details"])
    notes = _notes(results)
    timings = markdown_table(["step", "seconds"], [[k, f"{v:.1f}"] for k, v in details["timings"].items()])
    cfg = details["config"]
    text = (f"# Updating and forgetting a memory: synthetic facts\n\n"
            f"Written by `python -m studies update-study`. Entities per group: {details['groups']}. "
            f"QA: multiple choice among "
            f"{1 + cfg['distractors']} values (chance {100 / (1 + cfg['distractors']):.1f} %), memory mixed at "
            f"λ = {cfg['lam']}" + (f"; EM of generated answers after {cfg['shots']} demonstrations beside it"
                                   if cfg["em"] else "") + "." + _probes(cfg) + "\n\n"
            f"{table}\n\n{notes}{_variant_table(results)}{_seed_section(details)}"
            "## QA per group and step (multiple choice % / EM %)\n\n"
            f"{_score_table(details['scores'])}\n\n"
            f"## Wall time\n\n{timings}\n\nThe retraining time (`retrain_s`) covers every stage a memory built "
            "from scratch needs: the datastore (training keys and the evaluation keystores), the kNN-LM sweep (it "
            "chooses the teacher's temperature), the teacher and the memory; `retrain_core_s` only the training keys, "
            "the teacher and the memory, as the stages recorded them (`timings.json`; a stage under one second is "
            "not recorded). The update covers the new documents' keys, their teacher rows and the fine-tuning.\n"
            + _reused(details))
    (out / "report.md").write_text(text)


def _probes(cfg: dict) -> str:
    """What the forget was given besides the documents, or nothing."""
    if not cfg.get("forget_probes"):
        return ""
    return (" The forget was given probes: each forgotten entity's four attributes asked in the scored prompt "
            "format, in a wording no scored question uses (`PROBE_WORDINGS`), taught the backbone's distribution "
            "at every position (`mlpmem forget --probes`).")


def _reused(details: dict) -> str:
    """What a study with ``from_study_table`` took from the finished one, or nothing."""
    if not details.get("from_study"):
        return ""
    return (f"\nThe first run (before any update) and the retrained memory are those of `{details['from_study']}` "
            "(`from_study`), scored again here on the same questions; `first_run_s`, `retrain_s` and "
            "`retrain_core_s` were measured there (same data, another process).\n")
