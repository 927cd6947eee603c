"""The commands ``python -m studies qa eval`` (one method on a JSONL of questions) and ``python -m studies qa
report`` (the whole QA report), declared in :mod:`studies.cli`."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from mlpmem.backbone import load_backbone
from mlpmem.errors import ConfigError
from mlpmem.utils.runtime import set_threads
from studies.qa.config import QASuiteConfig
from studies.qa.eval_qa import GenerationConfig, evaluate_questions, method_model, read_questions
from studies.qa.report import write_report
from studies.qa.suite import run_suite


def cmd_eval_qa(args: argparse.Namespace) -> None:
    """``--max-new-tokens`` / ``--batch-size`` / ``--precision`` left out: ``GenerationConfig``'s defaults."""
    set_threads()
    questions = read_questions(args.questions)
    model, tokenizer = load_backbone(args.backbone)
    mixed, prompt_fn, info = method_model(args.method, model, tokenizer, args.run, args.corpus, args.lam,
                                          args.lora_params, progress=not args.quiet, shots=args.shots)
    generation = GenerationConfig(**{k: v for k in ("max_new_tokens", "batch_size", "precision")
                                     if (v := getattr(args, k, None)) is not None})
    result = evaluate_questions(mixed, tokenizer, questions, prompt_fn, generation, progress=not args.quiet)
    summary = {"method": args.method, "em": result["em"], "f1": result["f1"], "n": result["n"], **info}
    print(json.dumps(summary, default=float))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**summary, "predictions": result["predictions"]}, f, indent=1, default=float)


def cmd_qa_report(args: argparse.Namespace) -> None:
    cfg = QASuiteConfig.from_yaml(args.config, args.set)
    if args.no_ablations:
        cfg.ablations = None
    if args.no_battery:
        cfg.battery = None
    results = run_suite(cfg, progress=not args.quiet, compute=not args.report_only)
    flags = "".join(f" --no-{name}" for name in ("ablations", "battery") if getattr(args, f"no_{name}"))
    sets = "".join(f" --set {shlex.quote(s)}" for s in args.set)
    command = f"python -m studies qa report {args.config}{sets}{flags}"
    path = write_report(results, cfg.docs_dir, command)
    print(path.read_text())
    print(f"report: {path}")


def cmd_qa_curve(args: argparse.Namespace) -> None:
    """The QA memory's learning curve (:mod:`studies.qa.curve`), written to ``--docs`` (default: its folder)."""
    from studies.bench.common import write_outputs
    from studies.qa.curve import CurveConfig, curve_report, learning_curve, plot_curve
    from studies.qa.runner import Context

    set_threads()
    cfg = QASuiteConfig.from_yaml(args.config, args.set)
    bench = args.benchmark or next(iter(cfg.benchmarks))
    if bench not in cfg.benchmarks:
        raise ConfigError(f"qa curve: no benchmark {bench!r} in {args.config} (it has {sorted(cfg.benchmarks)})")
    out = Path(cfg.out_dir) / bench / "curve"
    curve = CurveConfig(bench, args.epochs, args.lambdas, str(out))
    ctx = Context(cfg, bench, load_backbone(cfg.backbone), progress=not args.quiet)
    results = learning_curve(ctx, curve)
    sets = "".join(f" --set {shlex.quote(s)}" for s in args.set)
    command = (f"python -m studies qa curve {args.config}{sets} --epochs {args.epochs} "
               f"--lambdas {','.join(map(str, args.lambdas))}")
    write_outputs(args.docs or out, results, curve_report(results, command), plot_curve, "curve.png")
