"""The QA report: one Markdown page (with its PNGs) and a compact ``results.json``, written from the suite's results.

Tables: the QA table (rows: methods; columns: each benchmark's scores ± standard error, trainable parameters,
training time, bytes that inference needs besides the backbone), every method's **paired** difference from
the backbone with its 95 % interval and verdict (and a figure of Δ F1 with error bars), the perplexity of
each benchmark's memory run, the no-regression table with its paired differences (and figure), the lm-eval
battery's table and figure (:mod:`studies.qa.battery_report`, when the suite ran it), the ablation
tables and figures, and the paper's claims C1–C11 judged with the intervals
(:mod:`studies.qa.claims`). Intervals come from the per-item scores of the method files
(:mod:`studies.qa.intervals`, seeded bootstrap); a file without them shows "no interval".
Nothing here computes a model: every number is read from the results.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

from mlpmem.baselines.methods import METHODS
from mlpmem.evaluation.compare import rows_json
from mlpmem.evaluation.stats import BootstrapConfig
from mlpmem.reporting.tables import DASH, count, fixed, markdown_table, mebibytes
from mlpmem.utils.shards import write_json
from studies.ablation import study_table
from studies.bench.infer.measure import machine_label
from studies.qa.battery_report import battery_rows, battery_section, task_sources
from studies.qa.claims import claims
from studies.qa.gate_verdict import gate_section, gate_verdict, judged_text_ppl
from studies.qa.hallucination import hallucination_section
from studies.qa.interval_tables import (
    comparison_table,
    contrast_table,
    delta_figure,
    figure_line,
    score_cell,
)
from studies.qa.intervals import (
    METRIC_LABELS,
    bootstrap_config,
    contrast_comparisons,
    intervals_json,
    mean_f1,
    no_regression_comparisons,
    no_regression_methods,
    qa_comparisons,
    score_interval,
    task_metrics,
)
from studies.qa.per_item import without_per_item

LABELS = {"backbone": "backbone", "rag-dense": "RAG-dense", "rag-bm25": "RAG-BM25", "knnlm": "kNN-LM", "cpt": "CPT",
          "lora": "LoRA", "memory": "MLP Memory",
          "memory-gate": "MLP Memory + gate"}
PAPER = {  # Mistral-7B-v0.3 QA average (paper Table 1) and the ablation findings (Fig. 6, App. F/I/J)
    "qa": {"backbone": 32.12, "rag-dense": 33.38, "knnlm": 32.57, "cpt": 30.53, "lora": 32.28, "memory": 36.06},
}
ORDER = list(METHODS)
QA_FIGURE, NO_REGRESSION_FIGURE = "qa-delta-f1.png", "no-regression-delta.png"


def _mb(n: int | None) -> str:
    """Inference bytes in MB: ``0`` for a method that needs none, ``—`` where not measured."""
    return DASH if n is None else ("0" if n == 0 else mebibytes(n))


def _split_cell(r: dict, split: str, metric: str, cfg: BootstrapConfig) -> str:
    scored = r.get(split) or {}
    return score_cell(scored.get(metric), score_interval(scored, metric, cfg))


def qa_table(results: dict, cfg: BootstrapConfig) -> str:
    benches = results["benchmarks"]
    head = ["method"]
    for name, b in benches.items():
        head += [f"{name} EM", f"{name} F1"]
        if "held_out" in b["questions"]:
            head += [f"{name} held-out EM"]
    head += ["mean F1", "λ (validation)", "trainable params", "training s", "inference bytes besides backbone"]
    table = []
    for method in METHODS:
        rows = [b["methods"].get(method) for b in benches.values()]
        if all(r is None for r in rows):
            continue
        cells, lams = [LABELS[method]], []
        for (name, b), r in zip(benches.items(), rows):
            r = r or {}
            cells += [_split_cell(r, "test", "em", cfg), _split_cell(r, "test", "f1", cfg)]
            if "held_out" in b["questions"]:
                cells.append(_split_cell(r, "held_out", "em", cfg))
            if "lambda" in r:
                lams.append(f"{name}: {r['lambda']}")
            elif "gate_offset" in r:
                floor = f", floor {r['gate_floor']:g}" if r.get("gate_floor") else ""
                lams.append(f"{name}: gate offset {r['gate_offset']:g}{floor}")
        cells += [score_cell(*mean_f1(results, method, cfg)), ", ".join(lams) or "—"]
        per = [b["methods"].get(method) or {} for b in benches.values()]
        cells += [" / ".join(count(r.get("trainable_parameters")) for r in per),
                  " / ".join(fixed(r.get("train_seconds"), 0) for r in per),
                  " / ".join(_mb(r.get("inference_bytes")) for r in per)]
        table.append(cells)
    lines = [markdown_table(head, table)]
    names = " / ".join(benches)
    lines.append(f"\nEM / F1 in percent on the test questions (SQuAD normalization), ± one bootstrap standard error "
                 f"over the questions; mean F1 weighs every benchmark the same. Per-benchmark columns of the "
                 f"last three are in the order {names}. Training time: CPT/LoRA their fine-tuning; MLP Memory the "
                 "whole offline stage (key extraction + teacher search + memory training); kNN-LM the datastore's "
                 "key extraction; RAG the passage encoding. Inference bytes: memory weights, datastore keys + "
                 "values, dense passage embeddings, LoRA adapter, or (CPT) a whole new copy of the model.")
    if "synthetic" in benches and "chance_em_held_out" in benches["synthetic"]:
        lines.append(f"Held-out entities appear in no document: chance EM (most common value of each attribute) = "
                     f"{benches['synthetic']['chance_em_held_out']:.1f}.")
    if "halueval_qa" in benches:
        lines.append("halueval_qa held-out: the control questions, whose knowledge is in no corpus: a closed-book "
                     "method should stay at the backbone's level there.")
    lines += _openness_lines(benches) + _gate_text_lines(benches)
    return "\n".join(lines)


def _gate_text_lines(benches: dict) -> list[str]:
    """The gated memory on its run's held-out text: perplexity with the gate against the run's fixed λ."""
    out = []
    for name, b in benches.items():
        method = b["methods"].get("memory-gate") or {}
        g = method.get("gate_text_ppl")
        if g:
            which = ("MLP Memory + gate" if judged_text_ppl(method) else
                     "The memory run's own gate (trained on its validation text, as trained; not the gate scored here)")
            out.append(f"{which} on the held-out text of {name}'s memory run: perplexity "
                       f"{g['ppl_gate']:.3f} with the gate (mean λ_t {g['mean_gate']:.2f}) against "
                       f"{g['ppl_fixed']:.3f} at the run's fixed λ = {g['lambda_fixed']:g}.")
    return out


OPENNESS = {"questions": "the validation questions' answers", "negatives": "the negatives in their prompts",
            "unconditional": "the negatives as PMI's unconditional terms (answer prefix alone)"}


def _openness_lines(benches: dict) -> list[str]:
    """Where the question gate opens, per benchmark: its mean λ_t at the chosen offset on each kind of row."""
    out = []
    for name, b in benches.items():
        gated = b["methods"].get("memory-gate") or {}
        means, closed = gated.get("gate_mean_lambda"), gated.get("gate_closed_fraction")
        if means:
            parts = ", ".join(f"{OPENNESS[k]} {v:.3f}" for k, v in means.items())
            out.append(f"MLP Memory + gate on {name}, mean λ_t at its offset and floor: {parts}.")
        if closed:
            parts = ", ".join(f"{OPENNESS[k]} {100 * v:.0f} %" for k, v in closed.items())
            out.append(f"MLP Memory + gate on {name}, positions where its floor closes the gate (λ_t = 0): {parts}.")
    return out


def qa_differences(results: dict, cfg: BootstrapConfig, docs: Path) -> str:
    """Every method against the backbone, paired over the same questions, and the figure of Δ F1 (test)."""
    by_method = qa_comparisons(results, cfg, ORDER)
    if not by_method:
        return "(no backbone results to compare with)"
    figure = delta_figure(qa_comparisons(results, cfg, ORDER, splits=("test",)), LABELS, docs / QA_FIGURE,
                          metrics=("f1",))
    return "\n".join([comparison_table(by_method, LABELS, "benchmark"), "",
                      "Δ = method − backbone in points, paired: both scored on the same questions (matched by id), "
                      "the questions resampled together. A verdict is \"above\" / \"below\" only when the 95 % "
                      "interval excludes 0.", "", figure_line(figure, "Δ F1 vs backbone")])


def contrasts_section(results: dict, cfg: BootstrapConfig) -> str:
    """The gate against the fixed λ and the memory against kNN-LM, RAG, CPT and LoRA, paired over the same test
    questions."""
    found = contrast_comparisons(results, cfg)
    if not found:
        return "(the memory and none of its gate, kNN-LM, RAG, CPT or LoRA were scored)"
    return "\n".join([contrast_table(found, LABELS), "", "Δ = method − reference in points on the test questions "
                      "both answered, resampled together; \"above\" / \"below\" only when the 95 % interval "
                      "excludes 0."])


def _epochs_cell(run: dict) -> str:
    """``kept of trained`` epochs of a memory run's results (``—`` where not recorded)."""
    if run.get("epochs") is None:
        return DASH
    early = " (stopped early)" if run.get("stopped_early") else ""
    return f"{run.get('epochs_kept', run['epochs']):.3g} of {run['epochs']:.3g}{early}"


def perplexity_table(results: dict, docs: Path) -> str:
    """Each benchmark's memory run on its held-out text, how long its memory trained, and its learning curve."""
    header = ["benchmark", "corpus tokens (train)", "test PPL backbone", "kNN-LM (k, T, λ)",
              "MLP Memory + backbone (λ)", "memory alone", "80 % mass tokens LM / kNN / memory",
              "epochs kept of trained"]
    rows, figures = [], []
    for name, b in results["benchmarks"].items():
        r = b["memory_run"]
        t, c, d = r["test"], r["knnlm_chosen"], r.get("distribution", {})
        mass = " / ".join(fixed(d.get(k, {}).get("80%")) for k in ("backbone", "kNN", "memory"))
        rows.append([name, count(r["datastore_tokens"]), f"{t['backbone']:.3f}",
                     f"{t['knnlm']:.3f} ({c['k']}, {c['temperature']}, {c['lambda']})",
                     f"{t['memory+backbone']:.3f} ({r['lambda']})", f"{t['memory']:.3f}", mass, _epochs_cell(r)])
        curve = Path(results["config"]["out_dir"]) / name / "memory-run" / "learning_curve.png"
        if curve.is_file():
            shutil.copyfile(curve, docs / f"learning-curve-{name}.png")
            figures.append(f"![{name}: the memory's learning curve](learning-curve-{name}.png)")
    lines = [markdown_table(header, rows), "", "Epochs kept: the epochs the memory had trained when the weights kept "
             "were evaluated (with early stopping, the best validation evaluation; the run's pipeline config says "
             "when it evaluates and stops)."]
    return "\n".join(lines + ([""] + figures if figures else []))


def no_regression_table(results: dict, cfg: BootstrapConfig, docs: Path) -> str:
    table = no_regression_methods(results)
    if not table:
        return ("(none in the suite: its cloze facts and multiple-choice checks read BIG-bench, "
                "`no_regression.qa_wikidata` / `mc_tasks`; the battery below is the no-regression check)")
    columns = [(task, metric) for task, s in next(iter(table.values())).items() for metric in task_metrics(s)]
    by_method = no_regression_comparisons(results, cfg, ORDER)
    rows = []
    for method in (m for m in METHODS if m in table):
        cells = [score_cell(table[method].get(t, {}).get(m), score_interval(table[method].get(t), m, cfg))
                 for t, m in columns]
        deltas = [c.point_delta for c in by_method.get(method, []) if c.point_delta is not None]
        summary = (fixed(sum(deltas) / len(deltas)), fixed(min(deltas))) if deltas else (DASH, DASH)
        rows.append([LABELS[method], *cells, *summary])
    head = ["method", *(f"{t} {METRIC_LABELS[m]}" for t, m in columns), "mean Δ vs backbone", "worst Δ"]
    items = results["config"]["no_regression"]
    lines = [markdown_table(head, rows),
             f"\nModels of the `{items['memory_from']}` benchmark (the memory at its QA-tuned λ). qa_wikidata: "
             f"{items['qa_wikidata']} cloze facts, greedy, EM; multiple choice: up to {items['mc_limit']} items "
             "per task, accuracy by log-likelihood (LL) and by domain-conditional PMI (premise `Answer:`). "
             "Scores ± one bootstrap standard error over the items."]
    if by_method:
        figure = delta_figure(by_method, LABELS, docs / NO_REGRESSION_FIGURE)
        lines += ["", comparison_table(by_method, LABELS), "", figure_line(figure, "no-regression Δ vs backbone")]
    return "\n".join(lines)


def ablation_section(results: dict, docs_dir: Path) -> str:
    abl = results.get("ablations") or {}
    if not abl.get("studies"):
        return "(no ablations)"
    parts = [f"Validation perplexity on the ablation run `{abl['run_dir']}` (quick-scale data, see its config)."]
    for study, rows in abl["studies"].items():
        png = Path(abl["run_dir"]) / "ablations" / study / "results.png"
        if png.exists():
            docs_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, docs_dir / f"ablation-{study}.png")
        parts += [f"### {study}", "", study_table(study, rows), "", f"![{study}](ablation-{study}.png)", ""]
    return "\n".join(parts)


def claims_table(found: list[dict], results: dict) -> str:
    rows = [[f"{c['id']}: {c['claim']}", c["paper"], c["ours"], c["judged_by"],
             DASH if c["reproduced"] is None else ("yes" if c["reproduced"] else "**no**")] for c in found]
    lines = [markdown_table(["claim", "paper", "ours", "judged by", "reproduced"], rows),
             "", "A QA claim that one method beats another holds only when the paired 95 % interval of the F1 "
             "difference is above 0 on every benchmark; \"not distinguishable\" counts as not reproduced. "
             "— : undecided (a compared method file kept no per-item scores)."]
    studies = (results.get("ablations") or {}).get("studies", {})
    extra = []
    if "size" in studies:
        extra.append("memory size: " + ", ".join(f"{r['variant']} {r['joint_ppl']:.3f} "
                                                 f"({r['trainable_parameters']:,} params)" for r in studies["size"])
                     + " (paper: 11.41 → 11.35 → 11.25 for 221M → 359M → 772M, diminishing)")
    if "teacher" in studies:
        extra.append("teacher k / T: " + ", ".join(f"{r['variant']} {r['joint_ppl']:.3f}" for r in studies["teacher"])
                     + " (paper App. F: kNN-LM teacher k=1 10.30 → k=1024 9.43)")
    if extra:
        lines += ["", "Also measured (validation PPL of memory + backbone): " + "; ".join(extra) + "."]
    return "\n".join(lines)


def _gate_words(run: dict) -> str:
    """How memory-gate's gate was trained and its offset chosen (empty when the suite scored no gate)."""
    if "memory-gate" not in run.get("methods", []):
        return ""
    source = ("the validation questions (prompt, gold answer and its end)" if run.get("gate_training") == "questions"
              else "the memory run's validation text")
    if run.get("gate_negatives"):
        where = "BIG-bench items of families the suite does not score" if run.get("gate_negative_tasks") else \
            "HaluEval QA items the suite does not read, half closed-book, half with their knowledge in the prompt"
        twice = (", each also as PMI's unconditional term (answer prefix alone)"
                 if run.get("gate_negatives_unconditional") else "")
        source += f" and {run['gate_negatives']} negatives ({where}{twice})"
    rule = (" (the smallest within one standard error of the best F1)" if run.get("gate_offset_rule") == "one_se"
            else "")
    floors = run.get("gate_floor_grid", [0.0])
    if floors != [0.0]:
        rule += (f", then the floor (λ_t exactly 0 where the gate before its offset is below it) from {floors}"
                 + (" (the largest within one standard error of the best F1)"
                    if run.get("gate_floor_rule", "one_se") == "one_se" else " (the best F1)"))
    return (f"; the gate of MLP Memory + gate trained on {source}, its logit offset chosen on the validation "
            f"questions from {run.get('gate_offset_grid', [0.0])}{rule}")


def _intro(results: dict, command: str, cfg: BootstrapConfig) -> str:
    run = results["config"]
    qs = "; ".join(f"{n}: " + ", ".join(f"{k} {v}" for k, v in b["questions"].items())
                   for n, b in results["benchmarks"].items())
    mixtures = " and ".join(LABELS[m] for m in ("knnlm", "memory") if m in run.get("methods", []))
    lam = f"; λ of {mixtures} chosen on the validation questions from {run['lambda_grid']}" if mixtures else ""
    return (f"Regenerate from scratch with `{command}` (every number below is read from "
            f"`{run['out_dir']}/results.json`, written by that command). Backbone `{run['backbone']}`; greedy "
            f"decoding, prompt `Question: ...\\nAnswer:` after {run.get('shots', 0)} format demonstrations "
            f"(general-knowledge questions, the same for every method; `mlpmem.inference.prompts`){lam}"
            f"{_gate_words(run)}. Questions: "
            f"{qs}. Standard "
            f"errors and 95 % intervals: percentile bootstrap over the items, {cfg.resamples} resamples, seed "
            f"{cfg.seed} (`mlpmem.evaluation.stats`).")


STAGES = {"memory_run": "the memory run (keys, teacher, training)",
          "methods": "every method built and scored (λ / offset tuned, CPT and LoRA trained, no-regression checks)",
          "battery": "the lm-eval battery, every method"}


def cost_minutes(results: dict) -> dict:
    """Minutes of wall time per stage, per benchmark and over all (``"all"``), their ``"total"`` and the suite's
    logged ``"calls"``, from the times its files recorded; each entry counts the times that were not recorded
    (its minutes None when none was)."""
    def minutes(values: list) -> dict:
        known = [v for v in values if v is not None]
        return {"minutes": sum(known) / 60 if known else None, "not_recorded": len(values) - len(known)}

    benches = results["benchmarks"]
    offline = {b: [r["methods"].get("memory", {}).get("train_seconds")] for b, r in benches.items()}
    scoring = {b: [m.get("wall_seconds") for m in r["methods"].values()] for b, r in benches.items()}
    battery = list(((results.get("battery") or {}).get("wall_seconds") or {}).values())
    out = {"memory_run": {**{b: minutes(v) for b, v in offline.items()}, "all": minutes(sum(offline.values(), []))},
           "methods": {**{b: minutes(v) for b, v in scoring.items()}, "all": minutes(sum(scoring.values(), []))},
           "battery": {"all": minutes(battery)}}
    out["total"] = minutes(sum(offline.values(), []) + sum(scoring.values(), []) + battery)
    calls = results.get("calls") or []
    out["calls"] = minutes([c["seconds"] for c in calls]) | {"n": len(calls), "machines": sorted(
        {machine_label(m) if (m := c.get("machine")) else "not recorded" for c in calls})}
    return out


def cost_section(cost: dict, benches: list[str]) -> str:
    """The table of :func:`cost_minutes`: a row per stage and the total, in minutes (— where none was recorded)."""
    def cell(entry: dict | None) -> str:
        if not entry or entry["minutes"] is None:
            return "" if entry is None else "—"
        return f"{entry['minutes']:.0f}" + (" (some not recorded)" if entry["not_recorded"] else "")

    lines = ["| stage | " + " | ".join(benches) + " | all |", "|---" * (len(benches) + 2) + "|"]
    for key, label in STAGES.items():
        lines.append(f"| {label} | " + " | ".join(cell(cost[key].get(b)) for b in benches)
                     + f" | {cell(cost[key]['all'])} |")
    lines.append("| **total** | " + " | ".join("" for _ in benches) + f" | **{cell(cost['total'])}** |")
    if cost["calls"]["n"]:
        lines.append(f"| every computing call of the suite in its out_dir ({cost['calls']['n']}), wall clock: the "
                     "stages above, the data, the memory runs' evaluation | " + " | ".join("" for _ in benches)
                     + f" | {cell(cost['calls'])} |")
        lines += ["", "The calls ran on: " + "; ".join(cost["calls"]["machines"]) + "."]
    return "\n".join(["Minutes of wall time on the machine that ran each stage, as the files recorded it (the suite "
                      "resumes stage by stage, so the stages may come from several sessions and loads; preparing "
                      "the data and the tasks is not counted):", "", *lines])


def _shift_json(shifts: dict | None) -> dict:
    return {m: {t: asdict(x) for t, x in by_task.items()} for m, by_task in (shifts or {}).items()}


def write_report(results: dict, docs_dir: str | Path, command: str) -> Path:
    """``docs_dir/report.md``, its figures and ``docs_dir/results.json`` (the results without their per-item
    lists, plus ``intervals`` and ``claims``) from the suite's results."""
    docs = Path(docs_dir)
    docs.mkdir(parents=True, exist_ok=True)
    cfg = bootstrap_config(results)
    families, shifts, shorter_right = battery_rows(results, cfg)
    battery = families.get("battery", {})
    found = claims(results, cfg, battery, families.get("detect"))
    cost = cost_minutes(results)
    gate = gate_verdict(results, cfg)
    text = "\n".join([
        "# Knowledge QA, general capability, baselines and ablations", "", _intro(results, command, cfg), "",
        "## QA table (test questions)", "", qa_table(results, cfg), "",
        "## Paired differences from the backbone", "", qa_differences(results, cfg, docs), "",
        "## The memory against its alternatives (paired)", "", contrasts_section(results, cfg), "",
        "## Perplexity of each benchmark's memory run (held-out text of the corpus)", "",
        perplexity_table(results, docs), "",
        "## General capability (no regression)", "", no_regression_table(results, cfg, docs), "",
        "## General capability through lm-eval (the battery)", "",
        battery_section(battery, LABELS, docs, results.get("battery"), shifts.get("battery")), "",
        "## Hallucination (HaluEval, through lm-eval)", "",
        hallucination_section(families, LABELS, shifts.get("prefer"), shorter_right), "",
        "## The gate or the fixed λ", "", gate_section(gate, families, LABELS), "",
        "## The paper's claims at our scale", "", claims_table(found, results), "",
        "## Ablations", "", ablation_section(results, docs), "",
        "## What it cost", "", cost_section(cost, list(results["benchmarks"])), "",
    ])
    path = docs / "report.md"
    path.write_text(text)
    write_json(docs / "results.json", {**without_per_item(results), "intervals": intervals_json(results, cfg, ORDER),
                                       "claims": found, "battery_intervals": rows_json(battery),
                                       "hallucination": {**{f: rows_json(families[f]) for f in ("detect", "prefer")
                                                            if f in families},
                                                         "prefer_choice_shift": _shift_json(shifts.get("prefer")),
                                                         "prefer_right_is_shorter_percent": shorter_right},
                                       "sources": task_sources(results.get("battery")),
                                       "gate_verdict": gate,
                                       "cost_minutes": cost,
                                       "battery_choice_shift": _shift_json(shifts.get("battery"))})
    return path
