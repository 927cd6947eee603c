"""``mlpmem compare``: methods vs base on the same lm-eval tasks, paired, with 95 % intervals.

A thin wrapper of :mod:`mlpmem.evaluation.compare` (imported when the command runs): it prints the table
and, with ``--out DIR``, writes ``compare.md``, ``compare.json`` and ``delta.png`` there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.utils.names import name_list
from mlpmem.utils.outputs import PNG, check_output_file, check_output_folder, write_output


def _names(args: argparse.Namespace) -> list[str]:
    names = [Path(p).stem for p in args.method] if args.names is None else _given(args.names, "--names", "names")
    if len(names) != len(args.method) or len(set(names)) != len(names):
        raise ConfigError(f"--names needs one distinct name per --method ({len(args.method)}), got {names}")
    return names


def _given(items: list[str], option: str, what: str) -> list[str]:
    """``option``'s list (split at its commas by the parser) checked as given: see :func:`name_list`."""
    return name_list(",".join(items), option, what)


def compare(args: argparse.Namespace) -> None:
    from mlpmem.evaluation.compare import compare as compare_results
    from mlpmem.evaluation.compare import load_results, plot_deltas, rows_json, table
    from mlpmem.evaluation.stats import BootstrapConfig

    cfg = BootstrapConfig(resamples=args.resamples, seed=args.seed)
    outputs = _outputs(args.out) if args.out else None  # checked before any work
    names, tasks = _names(args), None if args.tasks is None else _given(args.tasks, "--tasks", "task names")
    base = load_results(args.base)
    rows = {name: compare_results(base, load_results(path), tasks, cfg) for name, path in zip(names, args.method)}
    text = table(rows, args.base_name)
    print(text)
    if outputs:
        write_output(outputs["compare.md"], (text + "\n").encode())
        summary = {"base": str(args.base), "bootstrap": cfg.to_dict(), "methods": rows_json(rows)}
        write_output(outputs["compare.json"], (json.dumps(summary, indent=1) + "\n").encode())
        print(f"table: {outputs['compare.md']}\nplot: {plot_deltas(rows, outputs['delta.png'], args.base_name)}")


SIGNATURES = {"compare.md": b"| method | task | metric |", "compare.json": b"{", "delta.png": PNG}
"""The files ``--out`` holds and how each one opens: a file of that name that opens otherwise is the user's."""


def _outputs(folder: str) -> dict[str, Path]:
    out = check_output_folder(folder, "--out")
    return {name: check_output_file(out / name, "--out", signature) for name, signature in SIGNATURES.items()}
