"""Ablations of the memory's training choices on one run's datastore and teacher.

Each variant is the run's config with some ``train.*`` values overridden; it trains into
``run_dir/ablations/<study>/<variant>/`` and is scored by its last-epoch validation perplexities
(memory alone, and memory + backbone at the best λ of the training config's grid). One table
(Markdown) and one bar chart (PNG) per study.
"""

from __future__ import annotations

import dataclasses

from mlpmem.errors import ConfigError
from mlpmem.shards import write_json

STUDIES = {
    "head-init": {
        "tied head, backbone init": {"tie_head": True, "init": "backbone"},
        "tied head, random init": {"tie_head": True, "init": "random"},
        "untied head, backbone init": {"tie_head": False, "init": "backbone"},
        "untied head, random init": {"tie_head": False, "init": "random"},
    },
    "alpha": {f"alpha={a}": {"alpha": a} for a in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)},
    "size": {p: {"preset": p} for p in ("tiny", "small", "base")},
    "epochs": {f"{e} epoch(s)": {"epochs": e} for e in (1, 2, 4)},
}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "=.-" else "_" for c in name)


def run_study(run, study: str, progress: bool = True) -> list[dict]:
    """Train every variant of ``study`` and return one row per variant (also written to disk)."""
    from mlpmem.pipeline import Run, stage_train

    if study not in STUDIES:
        raise ConfigError(f"unknown ablation study {study!r}; choose one of {sorted(STUDIES)}")
    rows = []
    base = run.path("ablations", study)
    for name, overrides in STUDIES[study].items():
        cfg = dataclasses.replace(run.cfg, train=dataclasses.replace(run.cfg.train, **overrides))
        variant = Run.__new__(Run)  # same run folder and loaded backbone, other train config
        variant.__dict__.update(run.__dict__, cfg=cfg)
        state = stage_train(variant, out=base / _slug(name))
        last = state["history"][-1]
        rows.append({"variant": name, **overrides, "memory_ppl": last["memory_ppl"],
                     "joint_ppl": last["joint_ppl"], "best_lambda": last["best_lambda"],
                     "backbone_ppl": last["backbone_ppl"], "train_seconds": state["train_seconds"],
                     "trainable_parameters": state["memory_trainable_parameters"]})
    write_json(base / "results.json", {"study": study, "rows": rows})
    (base / "results.md").write_text(study_table(study, rows) + "\n")
    plot_study(study, rows, base / "results.png")
    return rows


def study_table(study: str, rows: list[dict]) -> str:
    lines = [f"| {study} variant | validation PPL memory alone | validation PPL memory + backbone (λ) "
             "| trainable params | train s |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['memory_ppl']:.3f} | {r['joint_ppl']:.3f} ({r['best_lambda']}) | "
                     f"{r['trainable_parameters']:,} | {r['train_seconds']:.0f} |")
    lines.append(f"\nBackbone validation PPL: {rows[0]['backbone_ppl']:.3f}.")
    return "\n".join(lines)


def plot_study(study: str, rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=120)
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["joint_ppl"] for r in rows], 0.4, label="memory + backbone")
    ax.axhline(rows[0]["backbone_ppl"], color="gray", ls=":", label="backbone")
    ax.set_xticks(list(x), [r["variant"] for r in rows], rotation=20, ha="right", fontsize=7)
    ax2 = ax.twinx()
    ax2.bar([i + 0.2 for i in x], [r["memory_ppl"] for r in rows], 0.4, color="tab:orange", label="memory alone")
    ax.set_ylabel("validation PPL, mixed")
    ax2.set_ylabel("validation PPL, memory alone")
    lo = min(r["joint_ppl"] for r in rows)
    ax.set_ylim(lo * 0.97, rows[0]["backbone_ppl"] * 1.02)
    fig.legend(fontsize=7, loc="upper right")
    ax.set_title(f"Ablation: {study}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
