"""The learning curve of a trained memory: validation perplexity against the training tokens seen.

Drawn from the history of :func:`mlpmem.training.loop.train_memory` (one entry per evaluation): the memory
alone and memory + backbone at the chosen λ (left axis, log scale), that λ (right axis), and the backbone's
and kNN-LM's validation perplexity as flat references; below, the memory's sharpness.
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.reporting.plots import pyplot
from mlpmem.utils.shards import read_json


def write_learning_curve(state: dict, path: str | Path, knnlm_results: str | Path | None = None) -> Path:
    """The learning curve of a training ``state`` (as returned by ``train_memory``), with kNN-LM's validation
    perplexity from ``knnlm_results`` when that file exists."""
    knn = None
    if knnlm_results is not None and Path(knnlm_results).exists():
        knn = read_json(knnlm_results, "knnlm results")["validation"]["knnlm_ppl"]
    return plot_learning_curve(state["history"], path, knn, state.get("best_step"))


def plot_learning_curve(history: list[dict], path: str | Path, knnlm_ppl: float | None = None,
                        best_step: int | None = None) -> Path:
    """Write the learning curve of ``history`` to ``path`` (a PNG); ``best_step`` marks the best evaluation.
    With ``memory_mass80`` in the history a lower panel shows the memory's sharpness (tokens holding 80 % of
    its mass on the first validation positions)."""
    plt = pyplot()
    tokens = [h["tokens_seen"] if "tokens_seen" in h else h["step"] for h in history]
    sharp = [h.get("memory_mass80") for h in history]
    panels = 2 if any(v is not None for v in sharp) else 1
    fig, axes = plt.subplots(panels, 1, figsize=(6, 3.8 + 1.8 * (panels - 1)), dpi=120, sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1][:panels]})
    ax = axes[0, 0]
    ax.plot(tokens, [h["memory_ppl"] for h in history], "o-", ms=3, label="memory alone")
    ax.plot(tokens, [h["joint_ppl"] for h in history], "s-", ms=3, label="memory + backbone (chosen λ)")
    if history:
        ax.axhline(history[0]["backbone_ppl"], color="gray", lw=1, ls=":", label="backbone")
    if knnlm_ppl is not None:
        ax.axhline(knnlm_ppl, color="tab:red", lw=1, ls="-.", label="kNN-LM")
    for h, t in zip(history, tokens):
        if best_step is not None and h["step"] == best_step:
            ax.axvline(t, color="k", lw=0.8, alpha=0.4, label="best evaluation")
    ax.set_yscale("log")
    plain = plt.matplotlib.ticker.FormatStrFormatter("%.0f")  # 40, not 4 x 10^1
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    if panels == 2:
        low = axes[1, 0]
        low.plot(tokens, sharp, "d-", ms=3, color="tab:purple", label="memory")
        low.set_ylabel("tokens for 80 %\nof the mass", fontsize=8)
        low.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("training tokens seen" if history and "tokens_seen" in history[0] else "step")
    ax.set_ylabel("validation perplexity")
    lam = ax.twinx()
    lam.plot(tokens, [h["best_lambda"] for h in history], "^--", ms=3, color="tab:green", alpha=0.6)
    lam.set_ylim(-0.05, 1.05)
    lam.set_ylabel("chosen λ", color="tab:green")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("Validation perplexity during training", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
