"""The pipeline's commands: one stage (``mlpmem datastore``, ...), every stage (``run``, ``demo``), a run's
report, generation with its memory.

Imported only when one of them runs (the table names them as strings), so the pipeline loads here, at the top.
"""

from __future__ import annotations

import argparse
import json

from mlpmem.compute import model_device
from mlpmem.config import check_overrides
from mlpmem.errors import MlpmemError
from mlpmem.inference.gate_io import load_gate
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import check_lambda
from mlpmem.pipeline import records, require, run_pipeline, run_stage
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.evaluate import load_memory
from mlpmem.pipeline.preflight import preflight
from mlpmem.pipeline.reuse import reuse_stages
from mlpmem.pipeline.run import Run, check_config_home
from mlpmem.reporting.run_report import (
    distribution_table,
    knnlm_summary,
    results_table,
    retrieval_table,
    write_run_report,
)
from mlpmem.utils.shards import read_json

RESULTS = "run results (run `mlpmem eval` first)"


def _run(args: argparse.Namespace) -> Run:
    check_overrides(args.set)
    cfg = PipelineConfig.from_yaml(args.config, args.set)
    check_config_home(args.config, cfg.run_dir, args.set)
    return Run(cfg, progress=not args.quiet, config_file=args.config)


def _print_results(run: Run, results: dict) -> None:
    print(retrieval_table(run), results_table(results), distribution_table(results), sep="\n\n")
    print(f"\nreport: {run.path('report.md')}")


def datastore(args: argparse.Namespace) -> None:
    print(json.dumps(_stage(args, "datastore"), indent=1))


def knnlm(args: argparse.Namespace) -> None:
    print(knnlm_summary(_stage(args, "knnlm")))


def teacher(args: argparse.Namespace) -> None:
    manifest = _stage(args, "teacher")
    print(f"teacher: {manifest['rows']} positions, {manifest['bytes_per_token']} bytes/token")


def train(args: argparse.Namespace) -> None:
    state = _stage(args, "train")
    last = state["history"][-1:] and {k: state["history"][-1][k] for k in ("memory_ppl", "joint_ppl")}
    print(f"trained {state['step']} steps in {state['train_seconds']:.0f} s; history: " + json.dumps(last))


def evaluate(args: argparse.Namespace) -> None:
    the_run = _run(args)
    with the_run.locked(args.command_line):
        _print_results(the_run, run_stage(the_run, "eval"))


def _stage(args: argparse.Namespace, stage: str):
    """Run one stage of the pipeline under the run folder's lock (checked and recorded, see run_stage)."""
    the_run = _run(args)
    if stage == "datastore":
        preflight(the_run)
    with the_run.locked(args.command_line):
        return run_stage(the_run, stage, args.rebuild)


def _current_results(the_run: Run) -> dict:
    """``results.json`` of the run, refused if it was computed from another memory or configuration."""
    results = read_json(the_run.layout.results, RESULTS)
    records.check(the_run, "eval")
    return results


def _results_lambda(the_run: Run) -> float:
    """The λ chosen on validation by the evaluation of the run's current memory."""
    results = read_json(the_run.layout.results, RESULTS)
    if not records.results_match_memory(the_run):
        raise MlpmemError(f"{the_run.layout.results} was computed for another memory than {the_run.layout.memory}: "
                          f"run `mlpmem eval {the_run.config_file or 'CONFIG'}` first, or give --lam")
    return results["lambda"]


def report(args: argparse.Namespace) -> None:
    the_run = _run(args)
    with the_run.locked(args.command_line):
        results = _current_results(the_run)
        write_run_report(the_run, results)
    _print_results(the_run, results)


def run(args: argparse.Namespace) -> None:
    the_run = _run(args)
    preflight(the_run)  # before the folder holds a file and before key extraction
    with the_run.locked(args.command_line):
        if getattr(args, "reuse_from", None):
            taken = reuse_stages(the_run, args.reuse_from)
            print(f"taken from {args.reuse_from}: {', '.join(taken) or 'nothing (built from other settings)'}")
        _print_results(the_run, run_pipeline(the_run, rebuild=args.rebuild))


def demo(args: argparse.Namespace) -> None:
    """``run`` on a preset shipped inside the package: ``quick`` (``--mode quick``) or ``default`` (``--mode full``)."""
    args.config = "quick" if args.mode == "quick" else "default"
    run(args)


def generate(args: argparse.Namespace) -> None:
    """Continue ``--prompt`` with the backbone mixed with the run's memory (at the run's λ unless ``--lam``; with
    ``--gate`` at the λ_t of the run's learned gate)."""
    if not args.prompt.strip():
        raise MlpmemError("--prompt is empty: give the text to continue")
    if args.max_new_tokens < 1:
        raise MlpmemError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.lam is not None:
        check_lambda(args.lam, "--lam")  # before the run and its backbone load
    the_run = _run(args)
    require(the_run, ("train",))
    records.check_upstream(the_run, "train")
    records.check(the_run, "train")
    records.verify_memory(the_run)
    if args.gate and args.lam is not None:
        raise MlpmemError("--gate and --lam exclude each other: the gate chooses λ_t at every position")
    if args.gate and not (the_run.layout.gate / "gate.json").is_file():
        config = the_run.config_file or "CONFIG"
        raise MlpmemError(f"no gate in {the_run.layout.gate}: train it with `mlpmem gate {config}`")
    lam = args.lam if args.lam is not None else _results_lambda(the_run)
    model, tokenizer = the_run.backbone
    memory = load_memory(the_run)
    gate = load_gate(the_run.layout.gate, memory) if args.gate else None
    mixed = MemoryAugmentedForCausalLM.from_parts(model, memory, lam=lam, tokenizer=tokenizer, gate=gate)
    inputs = tokenizer([args.prompt], return_tensors="pt").to(model_device(model))
    if inputs["input_ids"].shape[1] == 0:
        raise MlpmemError("--prompt encodes to no token with this tokenizer: give some text")
    out = mixed.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                         pad_token_id=tokenizer.eos_token_id, **({"top_p": 0.9} if args.sample else {}))
    print(tokenizer.decode(out[0], skip_special_tokens=True))
