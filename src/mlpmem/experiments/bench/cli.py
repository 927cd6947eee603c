"""Arguments and entry points of ``mlpmem bench-infer`` and ``mlpmem bench-offline`` (registered in mlpmem.cli)."""

from __future__ import annotations

import argparse
import dataclasses

DEFAULT_CONFIG = "configs/default.yaml"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def add_arguments(choices: dict) -> None:
    """Add the benchmark options to the ``bench-infer`` and ``bench-offline`` sub-parsers.

    Options left out keep the defaults of ``InferBenchConfig`` / ``OfflineBenchConfig`` (not imported here,
    so that ``mlpmem --help`` stays fast).
    """
    for name in ("bench-infer", "bench-offline"):
        p = choices[name]
        p.add_argument("config", nargs="?", default=DEFAULT_CONFIG,
                       help=f"YAML config of the finished run to measure (default {DEFAULT_CONFIG})")
        p.add_argument("--threads", type=int, help="torch/FAISS threads (default: all cores)")
        p.add_argument("--repeats", type=int, help="timed repetitions (after the warm-up)")
        p.add_argument("--out", dest="out_dir", help="output folder (default runs/bench/infer or runs/bench/offline)")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
    p = choices["bench-infer"]
    p.add_argument("--prompt-tokens", type=int, help="prompt length (default 256)")
    p.add_argument("--new-tokens", type=int, help="generated tokens per repetition (default 32)")
    p.add_argument("--batch-sizes", type=_ints, help="comma-separated (default 1,4)")
    p.add_argument("--warmup", type=int, help="discarded warm-up repetitions (default 1)")
    p.add_argument("--methods", type=lambda t: t.split(","), help="subset of backbone,memory,knnlm,rag,knnlm-exact")
    p.add_argument("--no-ladder", dest="ladder", action="store_false", default=None,
                   help="skip the memory timed without each optimization")
    p.add_argument("--knn-min-keys", type=int, help="keys in the kNN-LM index (default 1,000,000)")
    p.add_argument("--knn-nlist", type=int, help="IVF lists of the kNN-LM index (default 4096)")
    p.add_argument("--knn-nprobe", type=int, help="lists searched per query (default 32)")
    p.add_argument("--rag-retriever", choices=("dense", "bm25"), help="RAG retriever (default dense)")
    p.add_argument("--lam", type=float, help="memory λ (default: the run's; 0.3 if the run chose 0)")
    p = choices["bench-offline"]
    p.add_argument("--train-tokens", type=int, help="cap of the training split (default 24,000)")
    p.add_argument("--train-steps", type=int, help="timed training steps (default 30)")
    p.add_argument("--teacher-queries", type=int,
                   help="queries of the full-size fp32 vs bf16 teacher search (default 2048; 0 skips)")


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def bench_infer(args: argparse.Namespace) -> None:
    from mlpmem.experiments.bench.infer import InferBenchConfig, main
    from mlpmem.experiments.bench.knn_setup import KnnSetupConfig

    values = _given(args, ("threads", "repeats", "out_dir", "prompt_tokens", "new_tokens", "batch_sizes", "warmup",
                           "methods", "ladder", "rag_retriever", "lam"))
    knn = KnnSetupConfig()
    if args.knn_min_keys is not None:
        knn.min_keys = args.knn_min_keys
    if args.knn_nlist is not None:  # FAISS wants >= 39 training keys per list
        knn.index = dataclasses.replace(knn.index, nlist=args.knn_nlist, train_size=39 * args.knn_nlist)
    if args.knn_nprobe is not None:
        knn.index = dataclasses.replace(knn.index, nprobe=args.knn_nprobe)
    values["knn"] = knn
    main(args.config, InferBenchConfig(**values), progress=not args.quiet)


def bench_offline(args: argparse.Namespace) -> None:
    from mlpmem.experiments.bench.offline import OfflineBenchConfig, main

    values = _given(args, ("threads", "repeats", "out_dir", "train_tokens", "train_steps", "teacher_queries"))
    main(args.config, OfflineBenchConfig(**values), progress=not args.quiet)
