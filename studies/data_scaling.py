"""``python -m studies scale-data``: quality against the size of the training corpus, the same recipe at each size.

The paper's central claim is that the memory's gain grows with its data. Each size is a full run of the given
config with the training split capped at that many tokens (whole documents in order, the last one cut, so
each size holds the smaller ones: a nested series), into ``<out>/runs/train-<tokens>/``; validation and test
are the config's, the same for every size. The largest size runs first; each smaller one takes the keys it
shares with it (every shard of windows before its cut, the validation and test keystores whole) from its
keystores instead of encoding them again (:func:`mlpmem.pipeline.reuse.take_key_shards`). Every run resumes, so
the series may span sessions. The report (``<out>/report.md``, ``results.json``, ``data_scaling.png``) sets
memory + backbone and kNN-LM (on the same datastore) against the training tokens, both as ratios to the backbone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.pipeline import run_pipeline
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import markdown_table
from mlpmem.utils.shards import write_json


@dataclass
class DataScalingConfig(Config):
    train_tokens: list[int] = field(default_factory=lambda: [40_000, 120_000, 0])
    """Training-split caps, one run each; 0: the whole training split."""
    out_dir: str = "runs/data-scaling"

    def validate(self) -> None:
        if len(self.train_tokens) < 1 or any(n < 0 or 0 < n < 2 for n in self.train_tokens):
            raise ConfigError(f"train_tokens must be token caps >= 2 (or 0: the whole split), got {self.train_tokens}")


def size_config(base: PipelineConfig, tokens: int, out_dir: Path) -> PipelineConfig:
    """``base`` with its training split capped at ``tokens`` (0: uncapped), run in its own folder."""
    caps = {k: v for k, v in base.corpus.max_tokens.items() if k != "train"}
    if tokens:
        caps["train"] = tokens
    name = f"train-{tokens}" if tokens else "train-all"
    return dataclasses.replace(base, run_dir=str(out_dir / "runs" / name),
                               corpus=dataclasses.replace(base.corpus, max_tokens=caps))


def run_scaling(config_path: str, cfg: DataScalingConfig, overrides: list[str] = (), progress: bool = True) -> dict:
    """Run (or resume) the pipeline at every size, then write the report; returns its results."""
    base = PipelineConfig.from_yaml(config_path, overrides)
    out = Path(cfg.out_dir)
    rows, largest = [], None
    for tokens in sorted(cfg.train_tokens, key=lambda n: -(n or float("inf"))):  # the largest first
        shared = None if largest is None else largest.backbone
        run = Run(size_config(base, tokens, out), progress=progress, backbone=shared)
        run.key_donor = largest  # the sizes are nested: a smaller one reuses the largest one's keys
        results = run_pipeline(run)
        rows.insert(0, size_row(results))
        largest = largest or run
    results = {"config": config_path, "overrides": list(overrides), "train_tokens": list(cfg.train_tokens),
               "sizes": rows}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    plot_scaling(rows, out / "data_scaling.png")
    (out / "report.md").write_text(report(results) + "\n")
    return results


def size_row(results: dict) -> dict:
    """One size's numbers from its run's ``results.json``."""
    test = results["test_ppl"]
    return {"train_tokens": results["datastore_tokens"], "test_ppl": test, "lambda": results["lambda"],
            "joint_over_backbone": test["joint"] / test["backbone"],
            "knnlm_over_backbone": test["knnlm"] / test["backbone"],
            "joint_over_knnlm": test["joint"] / test["knnlm"], "mass80": results["mass80"],
            "memory_over_backbone_covered": test["memory"] / test.get("backbone_covered", test["backbone"]),
            "memory_coverage": results["memory_coverage"], "epochs": results["epochs"],
            "train_tokens_per_s": results["train_tokens_per_s"],
            "tokens_per_trainable_parameter": results["datastore_tokens"] / results["memory_trainable_parameters"]}


def plot_scaling(rows: list[dict], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    tokens = [r["train_tokens"] for r in rows]
    ax.plot(tokens, [r["joint_over_backbone"] for r in rows], "o-", label="MLP Memory + backbone")
    ax.plot(tokens, [r["knnlm_over_backbone"] for r in rows], "s--", label="kNN-LM (same datastore)")
    alone = [r.get("memory_over_backbone_covered") for r in rows]
    if all(a is not None for a in alone):
        ax.plot(tokens, alone, "^:", label="MLP Memory alone (covered targets)")
    ax.axhline(1.0, color="gray", ls=":", lw=1, label="backbone")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens (datastore size)")
    ax.set_ylabel("test PPL / backbone test PPL")
    ax.legend(fontsize=7)
    ax.set_title("Quality against the size of the training corpus", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report(results: dict) -> str:
    rows = results["sizes"]
    cells = [[f"{r['train_tokens']:,}", f"{r['tokens_per_trainable_parameter']:.4f}",
              f"{r['test_ppl']['backbone']:.3f}",
              f"{r['test_ppl']['knnlm']:.3f}", f"{r['test_ppl']['joint']:.3f} (λ={r['lambda']})",
              f"{r['joint_over_backbone']:.3f}", f"{r['knnlm_over_backbone']:.3f}", f"{r['joint_over_knnlm']:.3f}",
              _memory_alone(r), f"{r['mass80']['memory']:.1f} / {r['mass80']['backbone']:.1f}", f"{r['epochs']:g}",
              f"{r['train_tokens_per_s']:,.0f}"]
             for r in rows]
    falls = all(b["joint_over_backbone"] < a["joint_over_backbone"] for a, b in zip(rows, rows[1:]))
    overrides = "".join(f" --set {o}" for o in results["overrides"])
    sizes = ",".join(str(n) for n in results.get("train_tokens", []))
    return "\n\n".join([
        "# Quality against the size of the training corpus",
        f"`python -m studies scale-data {results['config']}{overrides}"
        + (f" --train-tokens {sizes}`" if sizes else "`")
        + ": one full run per training-split size (nested: each size holds the smaller ones; 0 is the whole split), "
        "the same validation and test splits and recipe. Memory alone is over the test targets its corpus head "
        "covers, against the backbone on the same positions.",
        markdown_table(["training tokens", "tokens / trainable param", "backbone", "kNN-LM", "memory + backbone",
                        "memory + backbone / backbone", "kNN-LM / backbone", "memory + backbone / kNN-LM",
                        "memory alone / backbone (covered)", "tokens for 80 % of the mass, memory / backbone",
                        "epochs", "training tokens/s"], cells),
        f"Memory + backbone / backbone {'falls' if falls else 'does not fall'} at every step as the corpus grows.",
        "![quality against corpus size](data_scaling.png)",
    ])


def _memory_alone(row: dict) -> str:
    ratio = row.get("memory_over_backbone_covered")
    return "—" if ratio is None else f"{ratio:.3f} ({100 * row['memory_coverage']:.0f} % covered)"


def cmd_scale_data(args) -> None:
    cfg = DataScalingConfig(train_tokens=list(args.train_tokens), out_dir=args.out_dir)
    print(report(run_scaling(args.config, cfg, args.set, progress=not args.quiet)))
