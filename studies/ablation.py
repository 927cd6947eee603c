"""Ablations of the memory's design choices, each scored by validation perplexity.

Training studies (``head-init``, ``vocab``, ``alpha``, ``size``, ``epochs``, ``regularise``, ``seeds``): each
variant is the run's config with some values of its ``memory:`` and ``train:`` sections overridden (head, init,
vocabulary, size, dropout; alpha, epochs, weight decay, seed), trained on the run's own datastore and
teacher into ``run_dir/ablations/<study>/<variant>/`` (each with its learning curve). The variant equal to the run's own
finished memory (same memory section and training recipe) is that memory, read rather than trained again.

Retrieval studies (``layer``: the key layer's depth; ``teacher``: the teacher's k and temperature)
change what the memory is distilled from, so each variant gets its own sub-run
``run_dir/ablations/<study>/<variant>/`` with its own datastore (train + validation keystores, for a
new layer) and its own teacher; what a variant shares with the main run (same layer: the keystores;
same layer, k and T: the teacher) is read from the main run's folders, not rebuilt. The teacher
temperature is the main run's (chosen by its kNN-LM sweep) unless the variant sets it.

Every variant is scored by the validation perplexities of the weights it ends with (memory alone, and memory +
backbone at the best λ of the training config's grid): its last evaluation, or its best when the train config
restores the best (``train.eval_every`` / ``train.patience``). One table (Markdown) and one bar chart (PNG) per study.
The ``seeds`` study adds the spread of its seeds' scores and a row for their memories averaged
(:mod:`studies.ensemble`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import yaml

from mlpmem.backbone import resolve_layer
from mlpmem.datastore import build_keystore
from mlpmem.errors import ConfigError
from mlpmem.freshness import is_current
from mlpmem.pipeline import records, require
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.datastore import keystore_config
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher, teacher_config
from mlpmem.pipeline.train import eval_data, stage_train
from mlpmem.reporting.plots import pyplot
from mlpmem.reporting.tables import markdown_table
from mlpmem.training.checkpoint import read_state
from mlpmem.training.config import recipe
from mlpmem.training.selection import kept_evaluation
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import write_json
from studies.ensemble import DISTIL_VARIANTS, ensemble_row, member_folders, seed_spread, train_distilled
from studies.variant_runs import config_record, slug, variant_run, with_overrides

STUDIES = {  # study -> {variant: {"section.key": value}} over the run's memory: and train: sections
    "head-init": {
        "tied head, backbone init": {"memory.tie_head": True, "memory.init": "backbone"},
        "tied head, random init": {"memory.tie_head": True, "memory.init": "random"},
        "untied head, backbone init": {"memory.tie_head": False, "memory.init": "backbone"},
        "untied head, random init": {"memory.tie_head": False, "memory.init": "random"},
    },
    "vocab": {"full head": {"memory.vocab": "full"}, "corpus head": {"memory.vocab": "corpus"}},
    "alpha": {f"alpha={a}": {"train.alpha": a} for a in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)},
    "size": {p: {"memory.preset": p} for p in ("tiny", "small", "base")},
    "epochs": {f"{e} epoch(s)": {"train.epochs": e} for e in (1, 2, 4)},
    "seeds": {f"seed={s}": {"train.seed": s} for s in (0, 1, 2, 3)},  # + their ensemble (experiments.ensemble)
    "distil": DISTIL_VARIANTS,  # a memory trained against the seeds' ensemble (experiments.ensemble)
    "regularise": {
        "none": {},
        **{f"dropout {d}": {"memory.dropout": d} for d in (0.1, 0.3)},
        **{f"weight decay {w}": {"train.weight_decay": w} for w in (0.1, 0.3)},
    },
}
RETRIEVAL_STUDIES = {
    "layer": {f"layer={f}": {"layer": f} for f in (0.3, 0.6, 0.8, 1.0)},
    "teacher": {"k=16": {"k": 16}, "k=256": {"k": 256}, "k=1024": {"k": 1024},
                "k=1024, T=1": {"k": 1024, "temperature": 1.0}, "k=1024, T=10": {"k": 1024, "temperature": 10.0}},
}
ALL_STUDIES = sorted([*STUDIES, *RETRIEVAL_STUDIES])


def study_variants(study: str, names: list[str] | None = None) -> dict[str, dict]:
    """The variants of ``study`` (``names``: only those, in the study's order)."""
    if study not in ALL_STUDIES:
        raise ConfigError(f"unknown ablation study {study!r}; choose one of {ALL_STUDIES}")
    variants = {**RETRIEVAL_STUDIES, **STUDIES}[study]
    unknown = sorted(set(names or ()) - set(variants))
    if unknown:
        raise ConfigError(f"study {study!r} has no variant {unknown[0]!r}; choose among {list(variants)}")
    return {name: o for name, o in variants.items() if names is None or name in names}


def run_study(run, study: str, progress: bool = True, variants: list[str] | None = None) -> list[dict]:
    """Train every variant of ``study`` (or those named in ``variants``) and return one row per variant (also
    written to disk)."""
    chosen = study_variants(study, variants)
    base = run.path("ablations", study)
    rows = [variant_row(run, study, name, overrides, base / slug(name)) for name, overrides in chosen.items()]
    if study == "seeds" and len(rows) > 1:
        rows.append(ensemble_row(run, rows, member_folders(run, rows), eval_data(run, "validation")))
    write_json(base / "results.json", {"study": study, "config": config_record(run.cfg), "rows": rows})
    (base / "results.md").write_text(study_table(study, rows) + "\n")
    plot_study(study, rows, base / "results.png")
    return rows


def variant_row(run, study: str, name: str, overrides: dict, folder: Path) -> dict:
    """Train one variant into ``folder`` (or read the run's own memory where it is that variant): its row."""
    if study in RETRIEVAL_STUDIES:
        return _row(name, overrides, train_retrieval_variant(run, folder, overrides))
    if "knn_weight" in overrides:  # a distil variant: the seeds' memories are its teacher
        return _row(name, {key.split(".")[-1]: value for key, value in overrides.items()},
                    train_distilled(run, folder, overrides))
    cfg = with_overrides(run.cfg, overrides)
    if trained_as(run, cfg):  # the run's own memory is this variant: read, not trained again
        state = own_memory_state(run)
    else:
        variant = Run.__new__(Run)  # same run folder and loaded backbone, another memory or train section
        variant.__dict__.update(run.__dict__, cfg=cfg)
        state = stage_train(variant, out=folder)
    return _row(name, {key.split(".")[-1]: value for key, value in overrides.items()}, state)


def write_study_report(run, study: str, out: str | Path, command: str) -> None:
    """The study's last table, chart and rows (as :func:`run_study` wrote them into the run) as ``report.md``,
    ``results.json`` (with the command) and ``results.png`` in ``out``."""
    base, out = run.path("ablations", study), Path(out)
    results = json.loads((base / "results.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", {"command": command, **results})
    shutil.copyfile(base / "results.png", out / "results.png")
    table = (base / "results.md").read_text()
    (out / "report.md").write_text(f"# Ablation: {study}\n\n`{command}`\n\nRun `{run.dir}`: every variant trained "
                                   f"on its datastore and teacher, scored on validation.\n\n{table}\n"
                                   f"![{study}](results.png)\n")


def own_memory_state(run) -> dict:
    """The training state of the run's own finished memory (its stage resumes at its end), marked as such."""
    return {**stage_train(run), "main_run": True}


def trained_as(run, cfg) -> bool:
    """Whether the run's own memory finished training under ``cfg``'s memory and train recipe (a variant equal
    to it would be trained again to the same weights)."""
    finished = run.layout.train / "train_state.json"
    if not finished.is_file() or not run.layout.memory.is_dir():
        return False
    return is_current(read_state(finished, "finished training").built_from, recipe(cfg.train, cfg.memory.to_dict()))


def _row(name: str, overrides: dict, state: dict) -> dict:
    """A variant's scores: its last evaluation, or the best one when the run ended on the best weights."""
    last = kept_evaluation(state)
    return {"variant": name, **overrides, "memory_ppl": last["memory_ppl"], "joint_ppl": last["joint_ppl"],
            "best_lambda": last["best_lambda"], "backbone_ppl": last["backbone_ppl"],
            "memory_coverage": last.get("memory_coverage", 1.0), "memory_mass80": last.get("memory_mass80"),
            "epochs": last["epoch"],
            "stopped_early": state.get("stopped_early", False), "main_run": state.get("main_run", False),
            "train_seconds": state["train_seconds"], "trainable_parameters": state["memory_trainable_parameters"]}


def variant_config(run, folder, overrides: dict):
    """The main run's config with a new key layer and/or teacher k / T, running in ``folder``."""
    teacher = teacher_config(run)  # T as chosen by the main run's kNN-LM sweep
    teacher = dataclasses.replace(teacher, **{k: v for k, v in overrides.items() if k in ("k", "temperature")})
    backbone = run.cfg.backbone
    if "layer" in overrides:
        backbone = dataclasses.replace(backbone, layer=overrides["layer"])
    return dataclasses.replace(run.cfg, run_dir=str(folder), backbone=backbone, teacher=teacher,
                               teacher_temperature_from_knnlm=False)


def train_retrieval_variant(run, folder, overrides: dict) -> dict:
    """Keystores (linked if the layer is the main run's), a new teacher, then the memory, all in ``folder``; the
    run's own memory where the variant has the run's layer and teacher."""
    cfg = variant_config(run, folder, overrides)
    model = run.backbone[0]
    shared = set()
    if resolve_layer(model, cfg.backbone.layer) == resolve_layer(model, run.cfg.backbone.layer):
        shared |= {"datastore", "eval"}
        if cfg.teacher == teacher_config(run) and run.layout.teacher.exists():
            shared.add("teacher")  # the main run's teacher, unchanged
            if trained_as(run, cfg):
                return own_memory_state(run)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    variant = variant_run(run, cfg, folder, shared)
    if "datastore" not in shared:
        build_variant_keystores(variant)
    if "teacher" not in shared:
        stage_teacher(variant)
    return stage_train(variant)


def build_variant_keystores(variant) -> None:
    """Training keys and validation keys + LM log-probs at the variant's layer (test is not needed)."""
    set_threads()
    cfg, (model, tokenizer) = variant.cfg, variant.backbone
    for split, with_lm in (("train", False), ("validation", True)):
        folder = variant.layout.keystore(split)
        config = dataclasses.replace(keystore_config(cfg, with_lm), precision="fp32")
        build_keystore(config, model, tokenizer, split_tokens(variant, split), folder, progress=variant.progress,
                       desc=f"keys {split} ({folder.relative_to(variant.dir)})")


def study_table(study: str, rows: list[dict]) -> str:
    header = [f"{study} variant", "validation PPL memory alone", "validation PPL memory + backbone (λ)",
              "memory tokens for 80 % of the mass", "epochs (of the weights kept)", "trainable params", "train s"]
    cells = [[r["variant"] + (" (the run's own memory)" if r.get("main_run") else ""),
              f"{r['memory_ppl']:.3f}" + _coverage(r), f"{r['joint_ppl']:.3f} ({r['best_lambda']})",
              "-" if r.get("memory_mass80") is None else f"{r['memory_mass80']:.1f}",
              f"{r.get('epochs', '-')}" + (" (stopped early)" if r.get("stopped_early") else ""),
              f"{r['trainable_parameters']:,}", f"{r['train_seconds']:.0f}"] for r in rows]
    lines = [markdown_table(header, cells)]
    lines.append(f"\nBackbone validation PPL: {rows[0]['backbone_ppl']:.3f}.")
    if spread := seed_spread(rows):
        lines.append(f"\n{spread}")
    return "\n".join(lines)


def _coverage(row: dict) -> str:
    coverage = row.get("memory_coverage", 1.0)
    return f" (over {100 * coverage:.1f} % covered)" if coverage < 1.0 else ""


def plot_study(study: str, rows: list[dict], path) -> None:
    plt = pyplot()
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


def cmd_ablate(args: argparse.Namespace) -> None:
    """``python -m studies ablate CONFIG --study STUDY``: the study's variants on the run's datastore and teacher."""
    the_run = Run(PipelineConfig.from_yaml(args.config, args.set), progress=not args.quiet, config_file=args.config)
    with the_run.locked(args.command_line):
        require(the_run, ("datastore", "teacher"))  # the variants train on the run's datastore and teacher
        records.check_upstream(the_run, "train")
        rows = run_study(the_run, args.study, variants=args.variant or None)
        print(study_table(args.study, rows))
        if args.out:
            write_study_report(the_run, args.study, args.out, args.command_line)
            print(f"report: {Path(args.out) / 'report.md'}")
