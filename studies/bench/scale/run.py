"""``python -m studies bench scale`` itself: measure the requested parts, keep earlier ones, write after each part."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from studies.bench.scale.report import markdown, write_results
from studies.bench.scale.sections import (
    bench_corpus,
    bench_memory,
    bench_processes,
    bench_resume,
    bench_sharding,
)


def run_bench(config: str, out: str, tokens: int, worlds: list[int], sizes: list[int], dim: int, vocab: int,
              steps: int, docs_dir: str | None, command: str, repeats: list[int] = (), shard_steps: int = 0,
              shard_width: int = 4096) -> dict:
    """Measure the requested parts; parts measured by an earlier command into the same ``out`` are kept (each part
    records the command that measured it) and every part is written as soon as it is measured. With nothing to
    measure the page is written again from ``out``'s earlier results (after a change to how it is drawn)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    previous = out / "results.json"
    results = json.loads(previous.read_text()) if previous.is_file() else {}
    results["cores"] = len(os.sched_getaffinity(0))
    commands = results.setdefault("commands", {})
    parts = {"processes": (tokens, lambda: bench_processes(config, out, tokens, worlds)),
             "memory": (sizes, lambda: bench_memory(out, sizes, dim, vocab, steps)),
             "resume": (sizes, lambda: bench_resume(out, max(sizes))),
             "sharding": (shard_steps, lambda: bench_sharding(out, min(sizes or [60000]), dim, vocab, shard_steps,
                                                              shard_width)),
             "corpus": (repeats, lambda: bench_corpus(config, out, repeats))}
    for part, (wanted, measure) in parts.items():
        if wanted:
            results[part], commands[part] = measure(), command
            write_results(results, out, docs_dir, command)
    write_results(results, out, docs_dir, command)
    return results


def main_from_args(args: argparse.Namespace) -> None:
    """Entry of ``python -m studies bench scale`` (options declared in :mod:`studies.cli`): measure, print the Markdown.

    The results record ``args.command_line``, the command as typed (set by :func:`mlpmem.cli.spec.run`)."""
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else []
    command = args.command_line
    results = run_bench(args.config, args.out, args.tokens, [int(p) for p in args.processes.split(",")], sizes,
                        args.dim, args.vocab, args.train_steps, args.docs, command,
                        [int(r) for r in args.corpus_repeats.split(",") if r.strip()], args.shard_steps,
                        args.shard_width)
    print(markdown(results, command))
