"""The commands of the Memory Mosaics experiment (declared in :mod:`memory_mosaics.cli`, imported when one runs).

``memory-mosaics train <config> [--model mosaics|transformer|both]``: tokenizer, data, both models trained.
``memory-mosaics eval <config>``: the three questions; writes results.json, results.md, three-questions.png.
``memory-mosaics memory <config>``: an MLP Memory (the project's pipeline) on top of each trained model.
``memory-mosaics recall [--steps N] [--out DIR]``: planted-pair recall of tiny models of both kinds (seconds).
``memory-mosaics lm-eval ...``: ``mlpmem lm-eval`` once the model type is registered (this module imports it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from memory_mosaics.experiments.config import MosaicsExperiment, load_experiment
from memory_mosaics.experiments.experiment import KINDS, eval_stage, train_stage
from memory_mosaics.experiments.memory_on_top import memory_stage, memory_table
from memory_mosaics.experiments.recall import compare
from memory_mosaics.experiments.report import sizes_table, three_questions_table
from mlpmem.cli.harness import lm_eval
from mlpmem.reporting.tables import markdown_table
from mlpmem.utils.shards import write_json

MODELS = (*KINDS, "both")
"""The choices of ``--model``."""


def _exp(args: argparse.Namespace) -> MosaicsExperiment:
    return load_experiment(args.config, args.set)


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    return KINDS if args.model == "both" else (args.model,)


def cmd_mosaics_train(args: argparse.Namespace) -> None:
    for kind, state in train_stage(_exp(args), _kinds(args), not args.quiet, args.rebuild).items():
        val = [h["val"]["ppl"] for h in state.get("history", []) if "val" in h]
        print(f"{kind}: {state['step']} steps in {state['train_seconds']:.0f} s "
              f"({state.get('tokens_per_s', 0):.0f} tokens/s), validation PPL {val[-1] if val else float('nan'):.2f}")


def cmd_mosaics_eval(args: argparse.Namespace) -> None:
    results = eval_stage(_exp(args), _kinds(args), progress=not args.quiet)
    print(sizes_table(results), three_questions_table(results), sep="\n\n")


def cmd_mosaics_memory(args: argparse.Namespace) -> None:
    print(memory_table(memory_stage(_exp(args), _kinds(args), not args.quiet, args.rebuild)))


def cmd_mosaics_recall(args: argparse.Namespace) -> None:
    """``--steps`` left out: :func:`~.recall.compare`'s default. ``--out``: also ``report.md`` and
    ``results.json`` there."""
    torch.set_num_threads(1)
    steps = {} if args.steps is None else {"steps": args.steps}
    rows = compare(**steps)
    table = markdown_table(["model", "layers", "parameters", "planted-pair recall, accuracy % (chance 4.5)"],
                           [[r["kind"], r["layers"], f"{r['parameters']:,}", f"{r['accuracy']:.1f}"] for r in rows])
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        command = "memory-mosaics recall" + (f" --steps {args.steps}" if args.steps is not None else "")
        write_json(out / "results.json", {"command": command, "rows": rows})
        (out / "report.md").write_text(f"# Planted key-value recall\n\n`{command} --out {args.out}` "
                                       "(seeded; one thread)\n\n" + table + "\n")


def cmd_lm_eval(args: argparse.Namespace) -> None:
    """``mlpmem lm-eval``'s command, the Memory Mosaics model type registered (by this module's imports)."""
    lm_eval(args)
