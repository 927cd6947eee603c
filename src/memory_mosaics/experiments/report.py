"""The three-questions table (Markdown) and plots of a finished experiment (from ``results.json`` and the training
states)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlpmem.reporting.plots import pyplot

KIND_NAMES = {"mosaics": "Memory Mosaics v2", "transformer": "Transformer"}


def _fmt(x: float | None, digits: int = 1) -> str:
    return "not scored" if x is None else f"{x:.{digits}f}"


def sizes_table(results: dict) -> str:
    rows = ["| model | parameters | SwiGLU width | forward FLOPs/token (matmul + context) | train tokens/s | train s |",
            "|---|---:|---:|---:|---:|---:|"]
    for kind, s in results["sizes"].items():
        if kind not in KIND_NAMES:
            continue
        f = s["flops_per_token"]
        train = results["models"].get(kind, {}).get("train", {})
        rows.append(f"| {KIND_NAMES[kind]} | {s['parameters']:,} | {s['intermediate_size']} | "
                    f"{f['total'] / 1e6:.2f} M ({f['matmul'] / 1e6:.2f} + {f['context'] / 1e6:.2f}) | "
                    f"{train.get('tokens_per_s', float('nan')):.0f} | {train.get('train_seconds', float('nan')):.0f} |")
    return "\n".join(rows)


def three_questions_table(results: dict) -> str:
    models = results["models"]
    kinds = [k for k in KIND_NAMES if k in models]
    head = "| question | measure | " + " | ".join(KIND_NAMES[k] for k in kinds) + " |"
    rows = [head, "|---|---|" + "---:|" * len(kinds)]

    def row(q, what, values):
        rows.append(f"| {q} | {what} | " + " | ".join(values) + " |")

    row("persistent", "test perplexity (lower is better)", [_fmt(models[k]["test"]["ppl"], 2) for k in kinds])
    choices = results["config"]["eval"]["cloze_choices"]
    row("persistent", f"cloze facts, accuracy % ({choices} choices)", [_fmt(models[k]["cloze"]) for k in kinds])
    for i, nk in enumerate(models[kinds[0]]["new_knowledge"]):
        row("new knowledge", f"{nk['documents']} documents (~{nk['tokens']:.0f} tokens), accuracy %",
            [_fmt(models[k]["new_knowledge"][i]["accuracy"]) for k in kinds])
    for i, b in enumerate(models[kinds[0]].get("new_knowledge_by_distance", [])):
        span = f"{b['from']}–{b['to']}" if b["to"] is not None else f"≥ {b['from']}"
        row("new knowledge", f"fact {span} tokens back (all lengths pooled; {b['items']} items), accuracy %",
            [_fmt(models[k]["new_knowledge_by_distance"][i]["accuracy"]) for k in kinds])
    for i, icl in enumerate(models[kinds[0]]["icl"]):
        row("in-context learning", f"{icl['labels']} labels, {icl['query']} query, {icl['shots']} shots/class, "
            "accuracy %", [_fmt(models[k]["icl"][i]["accuracy"]) for k in kinds])
    return "\n".join(rows)


def plot(results: dict, path: Path) -> None:
    plt = pyplot()
    models = results["models"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    train_len = results["config"]["train"]["seq_len"]
    for kind, res in models.items():
        color = "tab:blue" if kind == "mosaics" else "tab:red"
        nk = res["new_knowledge"]
        axes[0].plot([r["tokens"] for r in nk], [r["accuracy"] for r in nk], "o-", color=color, label=KIND_NAMES[kind])
        for ax, query in ((axes[1], "unseen"), (axes[2], "seen")):
            for labels, style in (("semantic", "o-"), ("anonymous", "s--")):
                pts = [r for r in res["icl"] if r["labels"] == labels and r["query"] == query]
                ax.plot([r["shots"] for r in pts], [r["accuracy"] for r in pts], style, color=color,
                        label=f"{KIND_NAMES[kind]}, {labels}")
    chance_nk = 100 / results["config"]["eval"]["cloze_choices"]
    chance_icl = 100 / results["config"]["eval"]["icl_classes"]
    axes[0].axvline(train_len, color="grey", ls=":", label="training length")
    axes[0].axhline(chance_nk, color="black", lw=0.5, label="chance")
    axes[0].set(xscale="log", xlabel="context tokens (documents in context)", ylabel="accuracy %",
                title="New knowledge: question after n documents")
    for ax, query in ((axes[1], "unseen"), (axes[2], "seen")):
        ax.axhline(chance_icl, color="black", lw=0.5)
        ax.set(xlabel="demonstrations per class", ylabel="accuracy %", title=f"ICL, {query} query word")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def training_histories(out_dir: Path, kinds) -> dict[str, list[dict]]:
    """Each trained model's per-step history (``train_state.json``), for the models that have one."""
    histories = {}
    for kind in kinds:
        path = Path(out_dir) / kind / "train_state.json"
        if path.is_file():
            histories[kind] = json.loads(path.read_text()).get("history", [])
    return histories


def plot_training(histories: dict[str, list[dict]], path: Path, smooth: int = 25) -> None:
    """Training loss (running mean over ``smooth`` steps) and validation perplexity against step."""
    plt = pyplot()
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.6))
    for kind, history in histories.items():
        color = "tab:blue" if kind == "mosaics" else "tab:red"
        loss = np.array([h["loss"] for h in history])
        window = min(smooth, len(loss))
        running = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax_loss.plot(np.arange(window, len(loss) + 1), running, color=color, label=KIND_NAMES[kind])
        val = [h for h in history if "val" in h]
        ax_val.plot([h["step"] for h in val], [h["val"]["ppl"] for h in val], "o-", color=color,
                    label=KIND_NAMES[kind])
    ax_loss.set(xlabel="step", ylabel=f"training loss (mean of {smooth} steps)", title="Training loss")
    ax_val.set(xlabel="step", ylabel="validation perplexity", yscale="log", title="Validation perplexity")
    for ax in (ax_loss, ax_val):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: dict, out_dir: Path) -> str:
    histories = training_histories(out_dir, results["models"])
    text = (f"# Memory Mosaics v2 vs Transformer: three questions (`{out_dir}`)\n\n"
            f"## Sizes\n\n{sizes_table(results)}\n\n## Three questions\n\n{three_questions_table(results)}\n\n"
            "![three questions](three-questions.png)\n")
    if histories:
        text += "\n## Training\n\n![training curves](training.png)\n"
        plot_training(histories, Path(out_dir) / "training.png")
    (Path(out_dir) / "results.md").write_text(text)
    plot(results, Path(out_dir) / "three-questions.png")
    return text
