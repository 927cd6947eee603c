"""``mlpmem gate CONFIG``: train a run's learned mixing gate and compare it with the fixed λ (see
:mod:`mlpmem.pipeline.gate`). Imported only when the command runs."""

from __future__ import annotations

import argparse
import re

from mlpmem.config import check_overrides
from mlpmem.errors import MlpmemError
from mlpmem.pipeline import require
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.gate import Measure, gate_with_report
from mlpmem.pipeline.run import Run, check_config_home
from mlpmem.utils.runtime import set_threads


def gate(args: argparse.Namespace) -> None:
    """Train the gate of a finished run on validation, write it to ``run_dir/gate/`` with its report (and to
    ``--report DIR``), print the comparison with the fixed λ."""
    gate_measured(args)


def gate_measured(args: argparse.Namespace, measure: Measure | None = None) -> dict:
    """:func:`gate` with ``measure``'s fields added to the gate's entry (see :func:`mlpmem.pipeline.gate.stage_gate`);
    returns the entry."""
    check_overrides(args.set)
    cfg = PipelineConfig.from_yaml(args.config, args.set)
    check_config_home(args.config, cfg.run_dir, args.set)
    run = Run(cfg, progress=not args.quiet, config_file=args.config)
    require(run, ("train", "eval"))
    set_threads()
    name = args.name or run.dir.name
    if not re.fullmatch(r"[\w.+-]+", name):
        raise MlpmemError(f"--name {name!r}: use letters, digits and . + - _ only (it names a file)")
    entry = gate_with_report(run, name, args.command_line, [args.report] if args.report else [], args.rebuild,
                             measure)
    print(f"{name}: test PPL fixed λ={entry['lambda_fixed']:g} {entry['ppl_fixed']:.3f}, gate "
          f"{entry['ppl_gate']:.3f} (mean λ_t {entry['mean_gate']:.3f})\n"
          f"gate: {run.layout.gate}" + (f"\nreport: {args.report}" if args.report else ""))
    return entry
