"""``mlpmem lm-eval``: lm-evaluation-harness on any compared method of a run (memory, backbone, kNN-LM, RAG,
CPT, LoRA), on a Memory Mosaics folder or on a saved folder.

A thin wrapper: it imports :mod:`mlpmem.evaluation.harness` (which registers the ``mlpmem`` model type with
lm-eval and the ``mlpmem`` model type with transformers' Auto classes), then runs ``lm_eval.simple_evaluate``
and prints lm-eval's table. Imported only when the command runs.
"""

from __future__ import annotations

import argparse


def lm_eval(args: argparse.Namespace) -> None:
    """Evaluate ``--model`` with ``--model-args`` on ``--tasks``; print the table, write ``--output``."""
    from mlpmem.evaluation.harness import evaluate, results_table, write_results

    tasks = [t for t in args.tasks.split(",") if t]
    results = evaluate(tasks, args.model, args.model_args or "", include_path=args.include_path,
                       local_only=args.local_only, limit=args.limit, num_fewshot=args.num_fewshot,
                       batch_size=args.batch_size, device=args.device, log_samples=args.log_samples)
    print(results_table(results))
    if args.output:
        print(f"results: {write_results(results, args.output)}")
