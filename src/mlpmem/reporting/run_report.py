"""Markdown tables of a run's measured results (every number read from the run folder)."""

from __future__ import annotations

from pathlib import Path

from mlpmem.corpora.documents import SPLITS
from mlpmem.layout import RunLayout, stage_seconds
from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import count, markdown_table, mebibytes, number
from mlpmem.utils.shards import MANIFEST, read_json


def keystore_rows(layout: RunLayout) -> dict[str, int]:
    """Rows (scored tokens) of each split's keystore."""
    return {s: read_json(layout.keystore(s) / MANIFEST, f"{s} keystore manifest")["rows"] for s in SPLITS}


def knnlm_summary(results: dict) -> str:
    c = results["chosen"]
    return (f"kNN-LM chosen on validation: k={c['k']}, T={c['temperature']}, lambda={c['lambda']}\n"
            f"test perplexity: backbone {results['test']['backbone_ppl']:.3f} -> kNN-LM "
            f"{results['test']['knnlm_ppl']:.3f} ({results['test']['tokens']} tokens)")


def retrieval_table(run) -> str:
    """The retrieval-side measurements of one run as a Markdown table."""
    t = run.timings()
    knn = read_json(run.layout.knnlm_results, "knnlm results")
    teacher = read_json(run.layout.teacher / MANIFEST, "teacher manifest")
    keys = t.get("keys_train", {})
    teach = t.get("teacher", {})
    ratio = stage_seconds(teach) / stage_seconds(keys) if teach and keys else None
    tokens = keystore_rows(run.layout)
    c = knn["chosen"]
    rows = [
        ("tokens train / validation / test", " / ".join(count(tokens[s]) for s in tokens)),
        ("key extraction (truncated forward), tokens/s", number(keys.get("tokens_per_s"), 0)),
        ("teacher build, s (ratio to key extraction)", f"{number(stage_seconds(teach), 0)} ({number(ratio, 2)})"),
        ("teacher bytes per token", number(teacher["bytes_per_token"], 2)),
        ("teacher k / T / top-K", f"{teacher['k']} / {teacher['temperature']} / {teacher['top_k']}"),
        ("kNN-LM k / T / λ (chosen on validation)", f"{c['k']} / {c['temperature']} / {c['lambda']}"),
        ("validation PPL backbone → kNN-LM",
         f"{knn['validation']['backbone_ppl']:.3f} → {knn['validation']['knnlm_ppl']:.3f}"),
        ("test PPL backbone → kNN-LM", f"{knn['test']['backbone_ppl']:.3f} → {knn['test']['knnlm_ppl']:.3f}"),
    ]
    lines = [f"Run `{run.dir}` (backbone {run.cfg.backbone.name}, layer {run.cfg.backbone.layer}, "
             f"site {run.cfg.backbone.site}, corpus {run.cfg.corpus.name or run.cfg.corpus.path})", "",
             markdown_table(["measurement", "value"], rows)]
    lenders = sorted({v["reused_from"] for v in t.values() if isinstance(v, dict) and "reused_from" in v})
    if lenders:
        lines += ["", f"The datastore (and the stages built from the same settings after it) was taken from "
                      f"{', '.join(f'`{x}`' for x in lenders)} (`mlpmem run --reuse-from`); its timings are that "
                      "run's."]
    return "\n".join(lines)


def _rel(x: float, ref: float) -> str:
    return f"{100 * (x / ref - 1):+.1f} %"


def _partial(test: dict) -> bool:
    """Whether memory-alone perplexity is over part of the positions (a corpus head), against the backbone's there."""
    return test.get("memory_coverage", 1.0) < 1.0 and "backbone_covered" in test


def _coverage_note(test: dict) -> str:
    if test.get("memory_coverage", 1.0) >= 1.0:
        return ""
    there = f"; the backbone there: {test['backbone_covered']:.3f}, the column's reference" if _partial(test) else ""
    return f" (over the {100 * test['memory_coverage']:.1f} % of targets its corpus head covers{there})"


def results_table(results: dict) -> str:
    """The test table of issue #3: backbone, kNN-LM, memory alone, memory + backbone."""
    t, c = results["test"], results["knnlm_chosen"]
    train_s = results.get("train_seconds")
    mem_size = mebibytes(results["memory_bytes"]) + (" (+ backbone's tied head)" if results["memory_tied_head"] else "")
    header = ["method", "test PPL", "vs backbone", "settings (chosen on validation)",
              "inference needs besides the backbone", "training"]
    rows = [
        ["backbone", f"{t['backbone']:.3f}", "—", "—", "—", "—"],
        ["kNN-LM", f"{t['knnlm']:.3f}", _rel(t["knnlm"], t["backbone"]),
         f"k={c['k']}, T={c['temperature']}, λ={c['lambda']}",
         f"datastore {mebibytes(results['datastore_bytes'])} ({results['datastore_tokens']:,} keys) + search", "—"],
        ["MLP Memory alone" + _coverage_note(t), f"{t['memory']:.3f}",
         _rel(t["memory"], t["backbone_covered"] if _partial(t) else t["backbone"]), "λ=1", mem_size,
         f"{results['memory_trainable_parameters']:,} trainable params"],
        ["MLP Memory + backbone", f"{t['memory+backbone']:.3f}", _rel(t["memory+backbone"], t["backbone"]),
         f"λ={results['lambda']}", f"{mem_size}, {results['memory_parameters']:,} params" if train_s else mem_size,
         f"{train_s:,.0f} s" if train_s else "—"],
    ]
    lines = [markdown_table(header, rows)]
    lines.append(f"\nThe datastore is {results['datastore_bytes'] / results['memory_bytes']:.1f}× the memory's "
                 f"stored size; memory + backbone is {_rel(t['memory+backbone'], t['knnlm'])} against kNN-LM.")
    return "\n".join(lines)


def distribution_table(results: dict) -> str:
    return markdown_table(["distribution", "tokens holding 80 % of the mass", "tokens holding 99 %"],
                          [[name, f"{v['80%']:.1f}", f"{v['99%']:.1f}"] for name, v in results["distribution"].items()])


def plot_lambda(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    for split, style in (("validation_curve", "o-"), ("test_curve", "s--")):
        curve = results[split]
        lams = [float(k) for k in curve]
        ax.plot(lams, list(curve.values()), style, ms=3, label=f"memory + backbone ({split.split('_')[0]})")
    knn_curve = results.get("knnlm_validation_curve", {})
    if knn_curve:
        c = results["knnlm_chosen"]
        ax.plot([float(k) for k in knn_curve], list(knn_curve.values()), "^-", ms=3, color="tab:red", alpha=0.6,
                label=f"kNN-LM k={c['k']}, T={c['temperature']} (validation)")
    ax.axhline(results["test"]["backbone"], color="gray", lw=1, ls=":", label="backbone (test)")
    ax.axhline(results["test"]["knnlm"], color="tab:red", lw=1, ls="-.", label="kNN-LM (test)")
    ax.axvline(results["lambda"], color="k", lw=0.8, alpha=0.5)
    ax.set_xlabel("λ (weight of the memory)")
    ax.set_ylabel("perplexity")
    top = max(results["test"]["backbone"], results["validation_curve"]["0.0"]) * 1.25
    ax.set_ylim(min(min(results["test_curve"].values()), results["test"]["knnlm"]) * 0.95, top)
    ax.legend(fontsize=7)
    ax.set_title("Perplexity against λ", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_run_report(run, results: dict) -> None:
    plot_lambda(results, run.layout.lambda_plot)
    text = "\n\n".join([
        f"# mlpmem run `{run.dir}`",
        retrieval_table(run),
        "## kNN-LM sweep on validation (best λ per k and T)",
        sweep_table(read_json(run.layout.knnlm_results, "knnlm results")),
        "## Test perplexity", results_table(results),
        "![perplexity against lambda](lambda.png)",
        *([f"## Learning curve\n\n![validation perplexity during training]({run.layout.learning_curve.name})"]
          if run.layout.learning_curve.exists() else []),
        "## Sharpness of the distributions (paper Tables 7-8)", distribution_table(results),
    ])
    run.layout.report.write_text(text + "\n")


def summary_row(run_dir) -> dict:
    """The headline numbers of one finished run folder (read from its files only)."""
    layout = RunLayout(run_dir)
    timings = read_json(layout.timings, "timings")
    knn = read_json(layout.knnlm_results, "knnlm results")
    teacher_path = layout.teacher / MANIFEST
    teacher = read_json(teacher_path, "teacher manifest") if teacher_path.exists() else {}
    res = read_json(layout.results, "run results") if layout.results.exists() else None
    rows = keystore_rows(layout)
    keys, teach = timings.get("keys_train", {}), timings.get("teacher", {})
    return {
        "run": layout.root.name, "tokens": rows,
        "keys_tokens_per_s": keys.get("tokens_per_s"), "teacher_seconds": stage_seconds(teach),
        "teacher_over_keys": stage_seconds(teach) / stage_seconds(keys) if teach and keys else None,
        "teacher_bytes_per_token": teacher.get("bytes_per_token"), "knnlm": knn["chosen"],
        "backbone_ppl": knn["test"]["backbone_ppl"], "knnlm_ppl": knn["test"]["knnlm_ppl"],
        "memory_ppl": res["test"]["memory"] if res else None,
        "memory_coverage": res["test"].get("memory_coverage", 1.0) if res else None,
        "memory_mass80": res["distribution"]["memory"]["80%"] if res else None,
        "backbone_mass80": res["distribution"]["backbone"]["80%"] if res else None,
        "joint_ppl": res["test"]["memory+backbone"] if res else None,
        "memory_lambda": res["lambda"] if res else None,
    }


SUMMARY_HEAD = "| run | tokens train / val / test |"
"""How the summary table opens (``summarize --out`` replaces only a file that opens so)."""


def summary_table(run_dirs) -> str:
    """One row per run: the retrieval-side measurements and the test perplexities."""
    header = [*SUMMARY_HEAD.strip("| ").split(" | "), "keys tok/s", "teacher s (÷ keys)", "teacher B/token",
              "kNN-LM k, T, λ", "PPL backbone", "PPL kNN-LM", "PPL memory", "PPL memory + backbone (λ)",
              "tokens for 80 % of the mass, memory / backbone"]
    rows = []
    names = [Path(d).name for d in run_dirs]
    for d in run_dirs:
        r = summary_row(d)
        if names.count(r["run"]) > 1:  # two runs of one folder name: each labelled by its path as given
            r["run"] = str(d)
        c = r["knnlm"]
        tok = " / ".join(count(r["tokens"][s]) for s in ("train", "validation", "test"))
        joint = f"{r['joint_ppl']:.3f} ({r['memory_lambda']})" if r["joint_ppl"] else "—"
        rows.append([r["run"], tok, number(r["keys_tokens_per_s"], 0),
                     f"{number(r['teacher_seconds'], 0)} ({number(r['teacher_over_keys'], 2)})",
                     number(r["teacher_bytes_per_token"], 2), f"{c['k']}, {c['temperature']}, {c['lambda']}",
                     f"{r['backbone_ppl']:.3f}", f"{r['knnlm_ppl']:.3f}", _memory_cell(r), joint,
                     f"{number(r['memory_mass80'], 1)} / {number(r['backbone_mass80'], 1)}"])
    return markdown_table(header, rows)


def _memory_cell(row: dict) -> str:
    """Memory-alone PPL, with the share of test targets a corpus head covers when it is not all of them."""
    cell = number(row["memory_ppl"], 3)
    coverage = row.get("memory_coverage")
    return cell + (f" ({100 * coverage:.0f} % covered)" if coverage is not None and coverage < 1.0 else "")


def sweep_table(knn: dict) -> str:
    """Validation perplexity of kNN-LM for each (k, T), at its best λ: the sweep that chose the settings."""
    best: dict[tuple, dict] = {}
    for r in knn["sweep"]:
        key = (r["k"], r["temperature"])
        if key not in best or r["ppl"] < best[key]["ppl"]:
            best[key] = r
    ks = sorted({k for k, _ in best})
    temps = sorted({t for _, t in best})
    return markdown_table(["k \\ T", *(str(t) for t in temps)],
                          [[str(k), *(f"{best[(k, t)]['ppl']:.3f} (λ={best[(k, t)]['lambda']})" for t in temps)]
                           for k in ks])
