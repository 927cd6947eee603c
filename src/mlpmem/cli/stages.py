"""The pipeline's commands: one stage (``mlpmem datastore``, ...), every stage (``run``, ``demo``), a run's
report, generation with its memory, and ablations of it.

Imported only when one of them runs (the table names them as strings), so the pipeline loads here, at the top.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.experiments.ablation import run_study, study_table
from mlpmem.inference.augmented_lm import MemoryAugmentedLM
from mlpmem.pipeline import run_pipeline
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.evaluate import load_memory, stage_eval
from mlpmem.pipeline.knnlm import stage_knnlm
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.pipeline.train import stage_train
from mlpmem.reporting.run_report import (
    distribution_table,
    knnlm_summary,
    results_table,
    retrieval_table,
    write_run_report,
)
from mlpmem.utils.shards import read_json

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
RESULTS = "run results (run `mlpmem eval` first)"


def _run(args: argparse.Namespace) -> Run:
    return Run(PipelineConfig.from_yaml(args.config, args.set), progress=not args.quiet)


def _print_results(run: Run, results: dict) -> None:
    print(retrieval_table(run), results_table(results), distribution_table(results), sep="\n\n")
    print(f"\nreport: {run.path('report.md')}")


def datastore(args: argparse.Namespace) -> None:
    print(json.dumps(stage_datastore(_run(args), args.rebuild), indent=1))


def knnlm(args: argparse.Namespace) -> None:
    print(knnlm_summary(stage_knnlm(_run(args))))


def teacher(args: argparse.Namespace) -> None:
    manifest = stage_teacher(_run(args), args.rebuild)
    print(f"teacher: {manifest['rows']} positions, {manifest['bytes_per_token']} bytes/token")


def train(args: argparse.Namespace) -> None:
    state = stage_train(_run(args), args.rebuild)
    last = state["history"][-1:] and {k: state["history"][-1][k] for k in ("memory_ppl", "joint_ppl")}
    print(f"trained {state['step']} steps in {state['train_seconds']:.0f} s; history: " + json.dumps(last))


def evaluate(args: argparse.Namespace) -> None:
    run = _run(args)
    _print_results(run, stage_eval(run))


def report(args: argparse.Namespace) -> None:
    run = _run(args)
    results = read_json(run.path("results.json"), RESULTS)
    write_run_report(run, results)
    _print_results(run, results)


def run(args: argparse.Namespace) -> None:
    the_run = _run(args)
    _print_results(the_run, run_pipeline(the_run, rebuild=args.rebuild))


def demo(args: argparse.Namespace) -> None:
    """``run`` on the shipped default (``--mode full``) or on the quick config, read from the source checkout."""
    config = CONFIGS / f"{'quick' if args.mode == 'quick' else 'default'}.yaml"
    if not config.is_file():
        raise MlpmemError(f"demo config {config} not found (run the demo from a source checkout)")
    args.config = str(config)
    run(args)


def ablate(args: argparse.Namespace) -> None:
    print(study_table(args.study, run_study(_run(args), args.study)))


def generate(args: argparse.Namespace) -> None:
    """Continue ``--prompt`` with the backbone mixed with the run's memory (at the run's λ unless ``--lam``)."""
    the_run = _run(args)
    model, tokenizer = the_run.backbone
    lam = args.lam if args.lam is not None else read_json(the_run.path("results.json"), RESULTS)["lambda"]
    mixed = MemoryAugmentedLM(model, load_memory(the_run), lam=lam, tokenizer=tokenizer)
    inputs = tokenizer([args.prompt], return_tensors="pt")
    out = mixed.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                         pad_token_id=tokenizer.eos_token_id, **({"top_p": 0.9} if args.sample else {}))
    print(tokenizer.decode(out[0], skip_special_tokens=True))
