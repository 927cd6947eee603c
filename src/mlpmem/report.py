"""Markdown tables of a run's measured results (every number read from the run folder)."""

from __future__ import annotations

from mlpmem.shards import read_json


def _fmt(x, digits=2):
    return "—" if x is None else (f"{x:,.{digits}f}" if isinstance(x, float) else f"{x:,}")


def knnlm_summary(results: dict) -> str:
    c = results["chosen"]
    return (f"kNN-LM chosen on validation: k={c['k']}, T={c['temperature']}, lambda={c['lambda']}\n"
            f"test perplexity: backbone {results['test']['backbone_ppl']:.3f} -> kNN-LM "
            f"{results['test']['knnlm_ppl']:.3f} ({results['test']['tokens']} tokens)")


def retrieval_table(run) -> str:
    """The retrieval-side measurements of one run as a Markdown table."""
    t = run.timings()
    knn = read_json(run.path("knnlm", "results.json"), "knnlm results")
    teacher = read_json(run.path("teacher", "manifest.json"), "teacher manifest")
    keys = t.get("keys_train", {})
    teach = t.get("teacher", {})
    ratio = teach["seconds"] / keys["seconds"] if teach and keys else None
    tokens = {s: read_json(run.path(*p, "manifest.json"), s)["rows"]
              for s, p in (("train", ("datastore",)), ("validation", ("eval", "validation")), ("test", ("eval", "test")))}
    c = knn["chosen"]
    rows = [
        ("tokens train / validation / test", " / ".join(f"{tokens[s]:,}" for s in tokens)),
        ("key extraction (truncated forward), tokens/s", _fmt(keys.get("tokens_per_s"), 0)),
        ("teacher build, s (ratio to key extraction)", f"{_fmt(teach.get('seconds'), 0)} ({_fmt(ratio)})"),
        ("teacher bytes per token", _fmt(teacher["bytes_per_token"])),
        ("teacher k / T / top-K", f"{teacher['k']} / {teacher['temperature']} / {teacher['top_k']}"),
        ("kNN-LM k / T / λ (chosen on validation)", f"{c['k']} / {c['temperature']} / {c['lambda']}"),
        ("validation PPL backbone → kNN-LM",
         f"{knn['validation']['backbone_ppl']:.3f} → {knn['validation']['knnlm_ppl']:.3f}"),
        ("test PPL backbone → kNN-LM", f"{knn['test']['backbone_ppl']:.3f} → {knn['test']['knnlm_ppl']:.3f}"),
    ]
    lines = [f"Run `{run.dir}` (backbone {run.cfg.backbone.name}, layer {run.cfg.backbone.layer}, "
             f"site {run.cfg.backbone.site}, corpus {run.cfg.corpus.name or run.cfg.corpus.path})", "",
             "| measurement | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def _mb(n) -> str:
    return f"{n / 2**20:,.1f} MB"


def results_table(results: dict) -> str:
    """The test table of issue #3: backbone, kNN-LM, memory alone, memory + backbone."""
    t, c = results["test"], results["knnlm_chosen"]
    train_s = results.get("train_seconds")
    mem_size = _mb(results["memory_bytes"]) + (" (+ backbone's tied head)" if results["memory_tied_head"] else "")
    lines = [
        f"| method | test PPL | settings (chosen on validation) | inference needs besides the backbone | training |",
        "|---|---|---|---|---|",
        f"| backbone | {t['backbone']:.3f} | — | — | — |",
        f"| kNN-LM | {t['knnlm']:.3f} | k={c['k']}, T={c['temperature']}, λ={c['lambda']} | datastore "
        f"{_mb(results['datastore_bytes'])} ({results['datastore_tokens']:,} keys) + search | — |",
        f"| MLP Memory alone | {t['memory']:.3f} | λ=1 | {mem_size} | "
        f"{results['memory_trainable_parameters']:,} trainable params |",
        f"| MLP Memory + backbone | {t['memory+backbone']:.3f} | λ={results['lambda']} | {mem_size}, "
        f"{results['memory_parameters']:,} params | {train_s:,.0f} s |" if train_s else
        f"| MLP Memory + backbone | {t['memory+backbone']:.3f} | λ={results['lambda']} | {mem_size} | — |",
    ]
    return "\n".join(lines)


def distribution_table(results: dict) -> str:
    d = results["distribution"]
    lines = ["| distribution | tokens holding 80 % of the mass | tokens holding 99 % |", "|---|---|---|"]
    lines += [f"| {name} | {v['80%']:.1f} | {v['99%']:.1f} |" for name, v in d.items()]
    return "\n".join(lines)


def plot_lambda(results: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    for split, style in (("validation_curve", "o-"), ("test_curve", "s--")):
        curve = results[split]
        lams = [float(k) for k in curve]
        ax.plot(lams, list(curve.values()), style, ms=3, label=f"memory + backbone ({split.split('_')[0]})")
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
    plot_lambda(results, run.path("lambda.png"))
    text = "\n\n".join([
        f"# mlpmem run `{run.dir}`",
        retrieval_table(run),
        "## Test perplexity", results_table(results),
        "![perplexity against lambda](lambda.png)",
        "## Sharpness of the distributions (paper Tables 7-8)", distribution_table(results),
    ])
    run.path("report.md").write_text(text + "\n")
