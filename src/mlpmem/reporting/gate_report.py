"""The gate's report: fixed λ vs the learned gate per run, the distribution of λ_t, where the gate opens.

A report folder holds ``results.json`` (one entry per run under ``corpora``, each with ``ppl_fixed``,
``ppl_gate``, ``mean_gate`` and its ``decode_ratio``; the top-level ``decode_ratio`` is the lowest measured),
``report.md`` and one ``lambda_hist-<run>.png`` per run. Writing a run's entry keeps the other runs' entries,
so gates of several runs (trained one command each) share one table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import DASH, markdown_table
from mlpmem.utils.shards import read_json, write_json

FORMAT = "mlpmem.gate-results/1"
RESULTS, REPORT = "results.json", "report.md"


def histogram_name(run: str) -> str:
    return f"lambda_hist-{run}.png"


def plot_lambda_histogram(lambda_t: np.ndarray, fixed: float, path: Path, title: str) -> Path:
    """Histogram of λ_t on the test positions, the fixed λ and the mean λ_t as vertical lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.hist(lambda_t, bins=np.linspace(0.0, 1.0, 51), color="#4C72B0")
    ax.axvline(fixed, color="#C44E52", linestyle="--", label=f"fixed λ = {fixed:g} (validation)")
    ax.axvline(float(np.mean(lambda_t)), color="#55A868", label=f"mean λ_t = {np.mean(lambda_t):.3f}")
    ax.set(xlabel="λ_t (weight of p_mem)", ylabel="test positions", title=title, xlim=(0, 1))
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def merge_results(folder: Path, name: str, entry: dict, command: str | None) -> dict:
    """``results.json`` of ``folder`` with ``entry`` as run ``name``'s (the other runs' entries kept)."""
    path = folder / RESULTS
    results = read_json(path, "gate results") if path.is_file() else {}
    if results.get("format") != FORMAT:
        results = {"format": FORMAT, "corpora": {}}
    results["corpora"][name] = {**entry, "command": command}
    ratios = [e["decode_ratio"] for e in results["corpora"].values() if e.get("decode_ratio") is not None]
    results["decode_ratio"] = min(ratios) if ratios else None
    return results


def _summary_rows(corpora: dict) -> list[list]:
    rows = []
    for name, e in corpora.items():
        change = 100 * (e["ppl_gate"] / e["ppl_fixed"] - 1)
        rows.append([name, e["corpus"], f"{e['tokens']:,}", f"{e['ppl_backbone']:.3f}", f"{e['lambda_fixed']:g}",
                     f"{e['ppl_fixed']:.3f}", f"{e['ppl_gate']:.3f}", f"{change:+.2f} %",
                     f"{e['mean_gate']:.3f}", DASH if e.get("decode_ratio") is None else f"{e['decode_ratio']:.3f}"])
    return rows


def _example_table(rows: list[dict]) -> str:
    def clean(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "⏎").strip() or "␣"

    return markdown_table(["λ_t", "context", "target", "p_lm(target)", "p_mem(target)"],
                          [[f"{r['lambda']:.3f}", "…" + clean(r["context"]), f"**{clean(r['target'])}**",
                            f"{r['p_lm']:.3f}", f"{r['p_mem']:.3f}"] for r in rows])


def _run_section(name: str, e: dict) -> list[str]:
    train, gate = e["train"], e["gate"]
    features = train["features"]
    lines = [f"## {name} (`{e['run_dir']}`)", "",
             f"Gate: hidden size {gate['hidden_size']}, key projection {gate['key_dim'] or 'none'}; Adam lr "
             f"{gate['lr']:g}, seed {gate['seed']}. Trained on the validation split ({train['train_rows']:,} "
             f"positions, {train['holdout_rows']:,} held out in blocks of {gate['block']} for early stopping): "
             f"held-out PPL {train['holdout_ppl_init']:.3f} at the start (the constant λ = "
             f"{train['init_lambda']:g}) → {train['holdout_ppl_best']:.3f} at step {train['best_step']} "
             f"(stopped at step {train['steps']}).", "",
             f"Test: {e['tokens']:,} positions; PPL backbone {e['ppl_backbone']:.3f}, fixed λ {e['ppl_fixed']:.3f}, "
             f"gate {e['ppl_gate']:.3f}. Mean λ_t {e['mean_gate']:.3f} (targets the memory's head covers: "
             f"{e['mean_gate_covered']:.3f}; uncovered: "
             f"{DASH if e['mean_gate_uncovered'] is None else format(e['mean_gate_uncovered'], '.3f')}).", "",
             f"Features recomputed from the backbone in {features['seconds']:.0f} s (validation); the recomputed "
             f"log p_lm of the targets differs from the keystore's by at most {features['max_abs_dlogp_lm']:.2g}.",
             ""]
    if e.get("decode_ratio") is not None:
        low, high = e["decode_ratio_quartiles"]
        step_ms = 1e3 / e["decode_tok_s_fixed"]
        lines += [f"Decode, batch 1, greedy, {e['new_tokens']} new tokens, {e['rounds']} rounds timing both back to "
                  f"back, {e['threads']} thread(s): median {e['decode_tok_s_gate']:.1f} tokens/s with the gate vs "
                  f"{e['decode_tok_s_fixed']:.1f} with the fixed λ; median ratio of the rounds "
                  f"**{e['decode_ratio']:.3f}** (quartiles {low:.3f}–{high:.3f}). The mixing step alone takes "
                  f"{e['mix_ms_gate']:.2f} ms with the gate vs {e['mix_ms_fixed']:.2f} ms fixed, against a "
                  f"{step_ms:.0f} ms decode step: {step_ms / (step_ms + e['mix_ms_gate'] - e['mix_ms_fixed']):.3f} of "
                  "the fixed-λ speed if nothing else differed.", ""]
    lines += [f"![λ_t on test]({histogram_name(name)})", ""]
    if e.get("examples"):
        lines += ["Where the gate opens most (highest λ_t on test):", "", _example_table(e["examples"]["open"]), "",
                  "and where it stays most closed:", "", _example_table(e["examples"]["closed"]), ""]
    return lines


def report_text(results: dict) -> str:
    corpora = results["corpora"]
    lines = ["# A learned gate λ_t against one fixed λ", "",
             "λ_t = sigmoid(g(features_t)) per position, g a small MLP on decode-time features of p_lm and p_mem "
             "(their entropies, the log of their largest probabilities, the log-probability each gives the other's "
             "argmax; optionally a projection of the key), trained with the backbone and memory frozen to maximise "
             "the mixture's log-likelihood on the validation split (never test), early-stopped on a held-out part "
             "of it. The fixed λ is the one the run's evaluation chose on validation; both are scored on the same "
             "test positions. Written by `mlpmem gate`; every number below comes from `results.json`.", "",
             markdown_table(["run", "corpus", "test tokens", "backbone PPL", "fixed λ", "PPL fixed λ", "PPL gate",
                             "gate vs fixed", "mean λ_t", "decode gate/fixed"], _summary_rows(corpora)), ""]
    for name, e in corpora.items():
        lines += _run_section(name, e)
        lines += ["Command: `" + (e.get("command") or DASH) + "`", ""]
    lines += ["## Not yet measured", "",
              "Only the runs in the table above are measured. Not yet measured: the other runs (among them the "
              "default preset and the by-article Wikipedia negative control), QA F1 with the gate (synthetic facts, "
              "disfl_qa), the general-capability comparisons, and the gate inside the QA suite, the lm-eval "
              "adapter and `python -m studies bench infer`.", ""]
    return "\n".join(lines)


def write_gate_report(folder: str | Path, name: str, entry: dict, lambda_t: np.ndarray,
                      command: str | None = None) -> dict:
    """Add run ``name``'s entry to ``folder``'s results.json, draw its λ_t histogram, rewrite report.md."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    results = merge_results(folder, name, entry, command)
    plot_lambda_histogram(lambda_t, entry["lambda_fixed"], folder / histogram_name(name), f"λ_t on test: {name}")
    write_json(folder / RESULTS, results)
    (folder / REPORT).write_text(report_text(results))
    return results
