"""The commands ``python -m studies bench infer``, ``offline``, ``packing`` and ``lm-eval``
(declared in :mod:`studies.cli`).

An option left out is ``None`` and keeps the default of ``InferBenchConfig`` / ``OfflineBenchConfig`` /
``PackingBenchConfig`` / ``LmEvalBenchConfig``.
"""

from __future__ import annotations

import argparse
import dataclasses

from studies.bench import offline, packing
from studies.bench.infer import run as infer
from studies.bench.infer.config import InferBenchConfig
from studies.bench.knn_setup import KnnSetupConfig


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def _knn(args: argparse.Namespace) -> KnnSetupConfig:
    knn = KnnSetupConfig()
    if args.knn_min_keys is not None:
        knn.min_keys = args.knn_min_keys
    if args.knn_nlist is not None:  # FAISS wants >= 39 training keys per list
        knn.index = dataclasses.replace(knn.index, nlist=args.knn_nlist, train_size=39 * args.knn_nlist)
    if args.knn_nprobe is not None:
        knn.index = dataclasses.replace(knn.index, nprobe=args.knn_nprobe)
    return knn


def bench_infer(args: argparse.Namespace) -> None:
    values = _given(args, ("threads", "repeats", "out_dir", "prompt_tokens", "new_tokens", "batch_sizes", "warmup",
                           "methods", "ladder", "rag_retriever", "lam", "knn_keys"))
    infer.main(args.config, InferBenchConfig(**values, overrides=args.set, knn=_knn(args)), progress=not args.quiet)


def bench_offline(args: argparse.Namespace) -> None:
    values = _given(args, ("threads", "repeats", "out_dir", "train_tokens", "train_steps", "teacher_queries"))
    offline.main(args.config, offline.OfflineBenchConfig(**values, overrides=args.set), progress=not args.quiet)


def bench_packing(args: argparse.Namespace) -> None:
    values = _given(args, ("threads", "repeats", "tokens", "docs_dir"))
    packing.main(args.config, packing.PackingBenchConfig(**values))


def bench_lm_eval(args: argparse.Namespace) -> None:
    from studies.bench import lm_eval_contexts  # imports lm-eval, which the other benchmarks do not need

    values = _given(args, ("run", "methods", "limit", "repeats", "threads", "tasks_dir", "tasks", "docs_dir",
                           "compare_precision", "profile"))
    if args.one_pass_only:
        values["per_method"] = False
    lm_eval_contexts.main(lm_eval_contexts.LmEvalBenchConfig(**values))
