"""``mlpmem lm-eval``: lm-evaluation-harness on any compared method of a run (memory, backbone, kNN-LM, RAG,
CPT, LoRA), on any causal LM folder or on a saved folder.

A thin wrapper: it imports :mod:`mlpmem.evaluation.harness` (which registers the ``mlpmem`` model type with
lm-eval and the ``mlpmem`` model type with transformers' Auto classes), then runs ``lm_eval.simple_evaluate``
and prints lm-eval's table. Imported only when the command runs. With ``--methods`` (backbone, memory, knnlm of one
run) the methods are scored from one backbone pass (:mod:`mlpmem.evaluation.one_pass`), each printed and written
to ``--output DIR/<method>.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def lm_eval(args: argparse.Namespace) -> None:
    """Evaluate ``--model`` with ``--model-args`` on ``--tasks`` (or every one of ``--methods``); print the
    table, write ``--output``."""
    from mlpmem.evaluation.harness import evaluate, results_table, write_results

    tasks = check_arguments(args)
    models = _one_pass(args) if args.methods else {None: args.model}
    for method, model in models.items():
        results = evaluate(tasks, model, args.model_args or "", include_path=args.include_path,
                           local_only=args.local_only, limit=args.limit, num_fewshot=args.num_fewshot,
                           batch_size=args.batch_size, device=args.device, log_samples=args.log_samples)
        print(("" if method is None else f"## {method}\n") + results_table(results))
        if args.output:
            path = args.output if method is None else f"{args.output}/{method}.json"
            print(f"results: {write_results(results, path)}")


def check_arguments(args: argparse.Namespace) -> list[str]:
    """The task names of ``--tasks``, once ``--tasks``, ``--methods``, ``--limit`` and ``--output`` are checked (before
    any model loads or any item is scored): each a one-line :class:`~mlpmem.errors.ConfigError`."""
    from mlpmem.errors import ConfigError
    from mlpmem.evaluation.model_args import check_method_args, parse_model_args
    from mlpmem.utils.names import name_list

    tasks = name_list(args.tasks, "--tasks", "lm-eval task names")
    if args.methods is not None:
        name_list(args.methods, "--methods", "methods")
    given = parse_model_args(args.model_args, "mlpmem" if args.methods else args.model)  # --methods: mlpmem's
    if args.model == "mlpmem" and args.methods is None:
        check_method_args(given)
    if args.limit is not None and not (0 < args.limit < 1 or (args.limit >= 1 and args.limit == int(args.limit))):
        raise ConfigError(f"--limit must be a fraction of the items in (0, 1) or a whole number of items >= 1, got "
                          f"{args.limit:g}")
    output = Path(args.output) if args.output else None
    if output is not None and args.methods and output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} is a file: with --methods it is a folder that gets one <method>.json "
                          "per method")
    if output is not None and not args.methods and output.is_dir():
        raise ConfigError(f"--output {output} is a folder: give the path of the JSON file to write (a folder is "
                          "--output with --methods)")
    return tasks


def _one_pass(args: argparse.Namespace) -> dict:
    """``{method: OnePassLM}`` of ``--methods``, each with the ``--model-args`` it reads (run=, lam=...)."""
    from lm_eval.utils import simple_parse_args_string

    from mlpmem.errors import ConfigError
    from mlpmem.evaluation.methods import OPTIONS
    from mlpmem.evaluation.one_pass import ONE_PASS_METHODS, OnePass

    methods = args.methods.split(",")
    if args.model != "mlpmem" or set(methods) - set(ONE_PASS_METHODS) or len(set(methods)) != len(methods):
        raise ConfigError(f"--methods takes distinct methods among {', '.join(ONE_PASS_METHODS)} of the mlpmem "
                          f"model type, got {args.methods!r}")
    common = simple_parse_args_string(args.model_args or "")
    if "method" in common:
        raise ConfigError("with --methods, leave method= out of --model-args")
    unused = sorted(set(common) - {"run"} - {k for m in methods for k in OPTIONS[m]})
    if unused:
        raise ConfigError(f"--model-args {unused[0]}= applies to none of --methods {args.methods}: leave it out")
    one = OnePass({m: {"method": m, **{k: v for k, v in common.items() if k == "run" or k in OPTIONS[m]}}
                   for m in methods})
    return one.models(int(args.batch_size) if str(args.batch_size).isdigit() else 8)
