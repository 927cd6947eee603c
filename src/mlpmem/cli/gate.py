"""``mlpmem gate CONFIG``: train a run's learned mixing gate and compare it with the fixed λ (see
:mod:`mlpmem.pipeline.gate`). Imported only when the command runs."""

from __future__ import annotations

import argparse
import re

from mlpmem.errors import MlpmemError
from mlpmem.pipeline import require
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.gate import gate_with_report
from mlpmem.pipeline.run import Run
from mlpmem.utils.runtime import set_threads


def gate(args: argparse.Namespace) -> None:
    """Train the gate of a finished run on validation, write it to ``run_dir/gate/`` with its report (and to
    ``--report DIR``), print the comparison with the fixed λ."""
    if args.decode_tokens < 0 or args.decode_rounds < 1:
        raise MlpmemError("--decode-tokens must be >= 0 and --decode-rounds >= 1")
    run = Run(PipelineConfig.from_yaml(args.config, args.set), progress=not args.quiet, config_file=args.config)
    require(run, ("train", "eval"))
    set_threads()
    name = args.name or run.dir.name
    if not re.fullmatch(r"[\w.+-]+", name):
        raise MlpmemError(f"--name {name!r}: use letters, digits and . + - _ only (it names a file)")
    entry = gate_with_report(run, name, args.command_line, [args.report] if args.report else [], args.rebuild,
                             args.decode_tokens, args.decode_rounds)
    speed = f", decode gate/fixed {entry['decode_ratio']:.3f}" if "decode_ratio" in entry else ""
    print(f"{name}: test PPL fixed λ={entry['lambda_fixed']:g} {entry['ppl_fixed']:.3f}, gate "
          f"{entry['ppl_gate']:.3f} (mean λ_t {entry['mean_gate']:.3f}){speed}\n"
          f"gate: {run.layout.gate}" + (f"\nreport: {args.report}" if args.report else ""))
