"""The QA report: one Markdown page (with the ablation PNGs) written from the suite's ``results.json``.

Tables: the QA table (rows: methods; columns: each benchmark, trainable parameters, training time,
bytes that inference needs besides the backbone), the perplexity of each benchmark's memory run, the
no-regression table, the ablation tables and figures, and the paper's claims C1–C9 with our
measurement beside each, marked reproduced or not. Nothing here computes a model: every number is
read from the results.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlpmem.baselines.methods import METHODS, OLD_NAMES
from mlpmem.experiments.ablation import study_table
from mlpmem.reporting.tables import DASH, count, fixed, markdown_table, mebibytes

LABELS = {"backbone": "backbone", "rag-dense": "RAG-dense", "rag-bm25": "RAG-BM25", "knnlm": "kNN-LM", "cpt": "CPT",
          "lora": "LoRA", "memory": "MLP Memory",
          "memory-gate": "MLP Memory + gate"}
PAPER = {  # Mistral-7B-v0.3 QA average (paper Table 1) and the ablation findings (Fig. 6, App. F/I/J)
    "qa": {"backbone": 32.12, "rag-dense": 33.38, "knnlm": 32.57, "cpt": 30.53, "lora": 32.28, "memory": 36.06},
}


def _mb(n: int | None) -> str:
    """Inference bytes in MB: ``0`` for a method that needs none, ``—`` where not measured."""
    return DASH if n is None else ("0" if n == 0 else mebibytes(n))


def qa_table(results: dict) -> str:
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
        cells, f1s, lams, info = [LABELS[method]], [], [], None
        for (name, b), r in zip(benches.items(), rows):
            r = r or {}
            info = info or r
            cells += [fixed(r.get("test", {}).get("em")), fixed(r.get("test", {}).get("f1"))]
            if "held_out" in b["questions"]:
                cells.append(fixed(r.get("held_out", {}).get("em")))
            if r.get("test"):
                f1s.append(r["test"]["f1"])
            if "lambda" in r:
                lams.append(f"{name}: {r['lambda']}")
        cells += [fixed(sum(f1s) / len(f1s)) if f1s else "—", ", ".join(lams) or "—"]
        per = [b["methods"].get(method) or {} for b in benches.values()]
        cells += [" / ".join(count(r.get("trainable_parameters")) for r in per),
                  " / ".join(fixed(r.get("train_seconds"), 0) for r in per),
                  " / ".join(_mb(r.get("inference_bytes")) for r in per)]
        table.append(cells)
    lines = [markdown_table(head, table)]
    names = " / ".join(benches)
    lines.append(f"\nEM / F1 in percent on the test questions (SQuAD normalization). Per-benchmark columns of the "
                 f"last three are in the order {names}. Training time: CPT/LoRA their fine-tuning; MLP Memory the "
                 "whole offline stage (key extraction + teacher search + memory training); kNN-LM the datastore's "
                 "key extraction; RAG the passage encoding. Inference bytes: memory weights, datastore keys + "
                 "values, dense passage embeddings, LoRA adapter, or (CPT) a whole new copy of the model.")
    if "synthetic" in benches and "chance_em_held_out" in benches["synthetic"]:
        lines.append(f"Held-out entities appear in no document: chance EM (most common value of each attribute) = "
                     f"{benches['synthetic']['chance_em_held_out']:.1f}.")
    return "\n".join(lines)


def perplexity_table(results: dict) -> str:
    header = ["benchmark", "corpus tokens (train)", "test PPL backbone", "kNN-LM (k, T, λ)",
              "MLP Memory + backbone (λ)", "memory alone", "80 % mass tokens LM / kNN / memory"]
    rows = []
    for name, b in results["benchmarks"].items():
        r = b["memory_run"]
        t, c, d = r["test"], r["knnlm_chosen"], r.get("distribution", {})
        mass = " / ".join(fixed(d.get(k, {}).get("80%")) for k in ("backbone", "kNN", "memory"))
        rows.append([name, count(r["datastore_tokens"]), f"{t['backbone']:.3f}",
                     f"{t['knnlm']:.3f} ({c['k']}, {c['temperature']}, {c['lambda']})",
                     f"{t['memory+backbone']:.3f} ({r['lambda']})", f"{t['memory']:.3f}", mass])
    return markdown_table(header, rows)


def no_regression_rows(results: dict) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Metric names and, per method, ``{metric: value}`` for the no-regression tasks."""
    name = results["config"]["no_regression"]["memory_from"]
    methods = results["benchmarks"].get(name, {}).get("methods", {})
    table: dict[str, dict[str, float]] = {}
    for method, r in methods.items():
        nr = r.get("no_regression")
        if not nr:
            continue
        row = {}
        for task, s in nr.items():
            if "em" in s:
                row[f"{task} EM"] = s["em"]
            else:
                row[f"{task} acc (LL)"], row[f"{task} acc (PMI)"] = s["acc_ll"], s["acc_pmi"]
        table[method] = row
    metrics = list(next(iter(table.values()), {}))
    return metrics, table


def no_regression_table(results: dict) -> str:
    metrics, table = no_regression_rows(results)
    if not table:
        return "(no no-regression results)"
    base = table.get("backbone", {})
    rows = []
    for method in METHODS:
        if method not in table:
            continue
        row = table[method]
        deltas = [row[m] - base[m] for m in metrics if m in base]
        mean, worst = (fixed(sum(deltas) / len(deltas)), fixed(min(deltas))) if deltas else (DASH, DASH)
        rows.append([LABELS[method], *(fixed(row[m]) for m in metrics), mean, worst])
    lines = [markdown_table(["method", *metrics, "mean Δ vs backbone", "worst Δ"], rows)]
    items = results["config"]["no_regression"]
    lines.append(f"\nModels of the `{items['memory_from']}` benchmark (the memory at its QA-tuned λ). qa_wikidata: "
                 f"{items['qa_wikidata']} cloze facts, greedy, EM; multiple choice: up to {items['mc_limit']} items "
                 "per task, accuracy by log-likelihood (LL) and by domain-conditional PMI (premise `Answer:`).")
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


def _best(rows: list[dict]) -> dict:
    return min(rows, key=lambda r: r["joint_ppl"])


def claims(results: dict) -> list[dict]:
    """C1–C9: the paper's claim, the paper's number, ours, and whether ours reproduces it."""
    out = []
    benches = results["benchmarks"]

    def add(cid, claim, paper, ours, ok):
        out.append({"id": cid, "claim": claim, "paper": paper, "ours": ours,
                    "reproduced": None if ok is None else bool(ok)})

    runs = {n: b["memory_run"]["test"] for n, b in benches.items()}
    add("C1", "memory + backbone lowers LM perplexity", "GPT2-large WikiText-103 15.81 → 11.41",
        "; ".join(f"{n}: {t['backbone']:.2f} → {t['memory+backbone']:.2f}" for n, t in runs.items()),
        all(t["memory+backbone"] < t["backbone"] for t in runs.values()))
    add("C2", "memory + backbone beats kNN-LM on the same datastore (PPL)", "memory below kNN-LM (Fig. 5 / Table 7)",
        "; ".join(f"{n}: memory {t['memory+backbone']:.2f} vs kNN-LM {t['knnlm']:.2f}" for n, t in runs.items()),
        all(t["memory+backbone"] < t["knnlm"] for t in runs.values()))

    def f1(name, method):
        r = benches[name]["methods"].get(method) or {}
        return r.get("test", {}).get("f1")

    have = lambda m: all(f1(n, m) is not None for n in benches)  # noqa: E731
    if have("memory"):
        add("C3", "memory above the backbone on every closed-book QA benchmark", "Mistral avg 32.12 → 36.06",
            "; ".join(f"{n}: F1 {f1(n, 'backbone'):.1f} → {f1(n, 'memory'):.1f}" for n in benches),
            all(f1(n, "memory") > f1(n, "backbone") for n in benches))
    if have("memory") and have("knnlm"):
        add("C4", "memory above kNN-LM on QA", "36.06 vs 32.57",
            "; ".join(f"{n}: {f1(n, 'memory'):.1f} vs {f1(n, 'knnlm'):.1f}" for n in benches),
            all(f1(n, "memory") > f1(n, "knnlm") for n in benches))
    if "synthetic" in benches and f1("synthetic", "memory") is not None:
        rag = max((f1("synthetic", m) for m in ("rag-dense", "rag-bm25") if f1("synthetic", m) is not None),
                  default=None)
        if rag is not None:
            gap = rag - f1("synthetic", "backbone")
            closed = (f1("synthetic", "memory") - f1("synthetic", "backbone")) / gap if gap > 0 else None
            add("C5", "memory closes at least half the gap to RAG on synthetic facts (issue goal; paper: memory "
                "above RAG)", "36.06 vs RAG 33.38",
                f"backbone {f1('synthetic', 'backbone'):.1f}, memory {f1('synthetic', 'memory'):.1f}, "
                f"best RAG {rag:.1f}: {fixed(None if closed is None else 100 * closed)} % of the gap closed",
                closed is not None and closed >= 0.5)
    if have("memory") and have("cpt") and have("lora"):
        add("C6", "memory above CPT and LoRA on QA", "36.06 vs CPT 30.53, LoRA 32.28",
            "; ".join(f"{n}: {f1(n, 'memory'):.1f} vs CPT {f1(n, 'cpt'):.1f}, LoRA {f1(n, 'lora'):.1f}"
                      for n in benches),
            all(f1(n, "memory") > max(f1(n, "cpt"), f1(n, "lora")) for n in benches))
    metrics, table = no_regression_rows(results)
    if "memory" in table and "backbone" in table:
        deltas = {m: table["memory"][m] - table["backbone"][m] for m in metrics}
        worst = min(deltas, key=deltas.get)
        add("C7", "no general-capability drop beyond one point", "9 NLP tasks 67.86 → 73.07, all above the backbone",
            f"worst Δ {deltas[worst]:+.1f} ({worst}); mean Δ {sum(deltas.values()) / len(deltas):+.1f}",
            deltas[worst] >= -1.0)
    studies = (results.get("ablations") or {}).get("studies", {})
    if "alpha" in studies:
        best = _best(studies["alpha"])
        add("C8", "best α strictly inside (0, 1)", "α ≈ 0.4, both ends worse",
            f"best {best['variant']} (validation PPL {best['joint_ppl']:.3f})", 0 < best["alpha"] < 1)
    if "layer" in studies:
        best = _best(studies["layer"])
        add("C9", "best key layer below the last", "≈ 70–90 % depth",
            f"best {best['variant']} (validation PPL {best['joint_ppl']:.3f})", best["layer"] < 1.0)
    return out


def claims_table(results: dict) -> str:
    rows = [[f"{c['id']}: {c['claim']}", c["paper"], c["ours"],
             DASH if c["reproduced"] is None else ("yes" if c["reproduced"] else "**no**")] for c in claims(results)]
    lines = [markdown_table(["claim", "paper", "ours", "reproduced"], rows)]
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


def current_names(results: dict) -> dict:
    """``results`` with the methods that earlier suites wrote under an old name (``base``) under the current one."""
    benches = {name: {**b, "methods": {OLD_NAMES.get(m, m): r for m, r in b.get("methods", {}).items()}}
               for name, b in results.get("benchmarks", {}).items()}
    return {**results, "benchmarks": benches}


def write_report(results: dict, docs_dir: str | Path, command: str) -> Path:
    """``docs_dir/report.md`` from the suite's results (old method names accepted)."""
    results = current_names(results)
    docs = Path(docs_dir)
    docs.mkdir(parents=True, exist_ok=True)
    cfg = results["config"]
    qs = "; ".join(f"{n}: " + ", ".join(f"{k} {v}" for k, v in b["questions"].items())
                   for n, b in results["benchmarks"].items())
    text = "\n".join([
        "# Knowledge QA, general capability, baselines and ablations",
        "",
        f"Regenerate from scratch with `{command}` (every number below is read from "
        f"`{cfg['out_dir']}/results.json`, written by that command). Backbone `{cfg['backbone']}`; greedy decoding, "
        f"prompt `Question: ...\\nAnswer:` after {cfg.get('shots', 0)} format demonstrations (general-knowledge "
        f"questions, the same for every method; `mlpmem.inference.prompts`); λ of kNN-LM and MLP Memory chosen on the "
        f"validation questions from {cfg['lambda_grid']}. Questions: {qs}.",
        "",
        "## QA table (test questions)", "", qa_table(results), "",
        "## Perplexity of each benchmark's memory run (held-out text of the corpus)", "", perplexity_table(results), "",
        "## General capability (no regression)", "", no_regression_table(results), "",
        "## The paper's claims at our scale", "", claims_table(results), "",
        "## Ablations", "", ablation_section(results, docs), "",
    ])
    path = docs / "report.md"
    path.write_text(text)
    return path
