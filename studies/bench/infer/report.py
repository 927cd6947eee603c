"""The Markdown report and the figure of ``python -m studies bench infer``, written from its results alone."""

from __future__ import annotations

from pathlib import Path

from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import markdown_table

PAPER = {"ttft_ms": {"backbone": 22, "memory": 27, "rag": 67, "knnlm": 151},
         "decode_tok_s": {"backbone": 42, "memory": 36, "rag": 24, "knnlm": 6}}
"""The paper's Fig. 1 (batch 1)."""


def targets(results: dict) -> list[list]:
    """The targets against the paper's ratios (batch 1), measured here."""
    t = results["methods"]
    med = lambda name, key: t[name]["1"][key]["median"] if name in t and "1" in t[name] else float("nan")  # noqa: E731
    ttft, tps = PAPER["ttft_ms"], PAPER["decode_tok_s"]
    rows = [["decode tok/s memory / backbone", med("memory", "decode_tok_s") / med("backbone", "decode_tok_s"),
             tps["memory"] / tps["backbone"], ">= 0.93"],
            ["TTFT memory / backbone", med("memory", "ttft_s") / med("backbone", "ttft_s"),
             ttft["memory"] / ttft["backbone"], "<= 1.10"]]
    if "knnlm" in t:
        rows.append(["decode tok/s memory / kNN-LM", med("memory", "decode_tok_s") / med("knnlm", "decode_tok_s"),
                     tps["memory"] / tps["knnlm"], ">= 6"])
    if "knnlm-exact" in t:
        rows.append(["decode tok/s memory / kNN-LM (exact search)",
                     med("memory", "decode_tok_s") / med("knnlm-exact", "decode_tok_s"), tps["memory"] / tps["knnlm"],
                     ">= 6"])
    if "rag" in t:
        rows.append(["TTFT RAG / memory", med("rag", "ttft_s") / med("memory", "ttft_s"), ttft["rag"] / ttft["memory"],
                     ">= 2.5"])
    return [[name, f"{ours:.3f}", f"{paper:.2f}", goal] for name, ours, paper, goal in rows]


def _spread(summary: dict, scale: float = 1.0) -> str:
    """``median [min-max]`` of a summary, times ``scale``, one decimal."""
    return f"{scale * summary['median']:.1f} [{scale * summary['min']:.1f}-{scale * summary['max']:.1f}]"


def gate_ratios(results: dict) -> dict[str, float]:
    """Decode tokens/s of the gated memory over the fixed-λ memory, per batch size (same run, interleaved)."""
    if "memory-gate" not in results["ratios"]:
        return {}
    gate, fixed = results["ratios"]["memory-gate"], results["ratios"]["memory"]
    return {b: gate[b]["decode_vs_backbone"] / fixed[b]["decode_vs_backbone"] for b in gate if b in fixed}


def gate_lines(results: dict) -> list[str]:
    ratios = gate_ratios(results)
    if not ratios:
        return []
    text = ", ".join(f"batch {b}: {r:.3f}" for b, r in sorted(ratios.items(), key=lambda kv: int(kv[0])))
    return [f"Decode tokens/s, learned gate / fixed λ: {text}.", ""]


def report(results: dict) -> str:
    cfg = results["config"]
    lines = ["# Inference speed: backbone, memory, kNN-LM, RAG\n",
             f"Machine: {results['machine']['cpu']}, {results['machine']['threads']} threads, models on "
             f"{results['machine'].get('device', 'cpu')}, torch "
             f"{results['machine']['torch']}. Prompt {cfg['prompt_tokens']} tokens, {cfg['new_tokens']} new tokens "
             f"(greedy, KV cache), {cfg['warmup']} warm-up + {cfg['repeats']} interleaved repetitions; median "
             f"[min-max]. Run `{results['run_config']}`; memory λ = {results['info']['memory']['lambda']} (the run "
             f"chose {results['info']['chosen_lambda']['memory']}), {results['info']['memory']['layers']} blocks, "
             f"tied head {results['info']['memory']['tie_head']}.\n"]
    header = ["method", "batch", "input tokens", "TTFT ms", "TTFT / backbone", "decode tok/s", "decode / backbone"]
    rows = []
    for name, by_batch in results["methods"].items():
        for b, e in sorted(by_batch.items(), key=lambda kv: int(kv[0])):
            r = results["ratios"][name][b]
            rows.append([name, b, e["input_tokens"], _spread(e["ttft_s"], 1e3), f"{r['ttft_vs_backbone']:.3f}",
                         _spread(e["decode_tok_s"]), f"{r['decode_vs_backbone']:.3f}"])
    rows.sort(key=lambda r: (int(r[1]), list(results["methods"]).index(r[0])))
    notes = [f"Note: {n}." for n in results["info"].get("notes", [])]
    lines += [markdown_table(header, rows), "", *notes, *([""] if notes else []), *gate_lines(results),
              "## Against the paper (batch 1)", "",
              markdown_table(["ratio", "measured", "paper (Fig. 1)", "target"], targets(results)), ""]
    lim = results["limits"]
    lines += ["## Weight-bound limit of the memory's decode ratio (batch 1)", "",
              f"Backbone weights {lim['backbone_bytes'] / 2**20:.1f} MiB, memory extra "
              f"{lim['memory_extra_bytes'] / 2**20:.1f} MiB, tied head {lim['head_bytes'] / 2**20:.1f} MiB: "
              + limit_text(lim), ""]
    mix = results["mixing"]
    lines += [f"Mixing one step (B=1, V={results['info'].get('vocab', '')}): one-pass "
              f"{1e6 * mix['one_pass']['median']:.0f} µs, two log_softmax + logaddexp "
              f"{1e6 * mix['two_log_softmax']['median']:.0f} µs.", ""]
    info = results["info"]
    q = info.get("bf16_quality")
    if q:
        lines.append(f"Memory blocks in bf16 (`memory:bf16`), first {q['positions']} validation positions: memory-only "
                     f"PPL {q['fp32_memory_ppl']:.3f} (fp32) vs {q['bf16_memory_ppl']:.3f} (bf16); mixed at "
                     f"λ={q['lambda']}: {q['fp32_joint_ppl']:.3f} vs {q['bf16_joint_ppl']:.3f} (backbone "
                     f"{q['backbone_ppl']:.3f}).\n")
    if "knnlm" in info:
        k = info["knnlm"]
        lines.append(f"kNN-LM: {k['keys']:,} keys, IVF-PQ nlist {k['index']['nlist']}, nprobe {k['index']['nprobe']}, "
                     f"{k['index']['pq_bytes']}-byte codes, rerank {k['index']['rerank']}; k={k['k']}, "
                     f"T={k['temperature']}, λ={k['lambda']}.")
    if "rag" in info:
        r, m = info["rag"], results["methods"]["rag"]["1"]
        retriever = "dense all-MiniLM-L6-v2" if r["retriever"] == "dense" else "BM25 (bm25s)"
        lines.append(f"RAG: {retriever} over {r['passages']} passages, top {r['top_k']}, prompt limit "
                     f"{r['max_prompt_tokens']} tokens; retrieval {1e3 * m['retrieval_s']['median']:.1f} ms of the "
                     f"batch-1 TTFT (median).")
    for name in ("knnlm", "knnlm-exact"):
        if name in results["methods"]:
            m = results["methods"][name]["1"]
            lines.append(f"{name} search: {1e3 * m['search_s']['median']:.0f} ms per batch-1 generation of "
                         f"{cfg['new_tokens']} tokens (median), i.e. "
                         f"{1e3 * m['search_s']['median'] / cfg['new_tokens']:.1f} ms per token.")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path:
    """Two bar panels like the paper's Fig. 1: TTFT (ms) and decode tokens/s at batch 1."""
    plt = pyplot()
    names = [n for n in ("backbone", "memory", "rag", "knnlm", "knnlm-exact") if n in results["methods"]]
    labels = {"backbone": "Backbone", "memory": "Backbone\n+ MLP Memory", "rag": "RAG", "knnlm": "kNN-LM\n(IVF-PQ)",
              "knnlm-exact": "kNN-LM\n(exact)"}
    ttft = [1e3 * results["methods"][n]["1"]["ttft_s"]["median"] for n in names]
    tps = [results["methods"][n]["1"]["decode_tok_s"]["median"] for n in names]
    colors = ["#7f7f7f", "#2ca02c", "#1f77b4", "#d62728", "#9467bd"][: len(names)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, values, title, unit in ((axes[0], ttft, "Time to first token (lower is better)", "ms"),
                                    (axes[1], tps, "Decoding speed (higher is better)", "tokens/s")):
        bars = ax.bar([labels[n] for n in names], values, color=colors)
        for bar, value in zip(bars, values):
            ratio = value / values[0]
            ax.annotate(f"{value:.1f}\n({ratio:.2f}x)", (bar.get_x() + bar.get_width() / 2, value),
                        ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.set_ylim(0, max(values) * 1.3)
    fig.suptitle(f"SmolLM2-135M, batch 1, {results['machine']['threads']} CPU threads", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def limit_text(lim: dict) -> str:
    if lim.get("corpus_head_rows") is not None:
        return (f"limit {lim['decode_ratio_limit_fused']:.3f} (the memory scores {lim['corpus_head_rows']:,} corpus "
                "tokens with its own head rows, counted in its extra bytes).")
    return (f"limit {lim['decode_ratio_limit_fused']:.3f} with the fused head, "
            f"{lim['decode_ratio_limit_separate_heads']:.3f} with two head reads.")
