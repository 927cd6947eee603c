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
