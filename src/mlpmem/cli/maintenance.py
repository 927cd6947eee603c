"""``mlpmem update``, ``forget`` and ``explain`` on a finished run folder (see :mod:`mlpmem.maintenance`).

The run is read from its own ``config.yaml`` (what built it); ``--set`` overrides the maintenance settings
(:class:`~mlpmem.maintenance.config.MaintenanceConfig`, e.g. ``--set update.replay_ratio=2``), ``--config`` reads
them from a YAML file first. Imported only when one of the commands runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.layout import RunLayout
from mlpmem.maintenance.config import MaintenanceConfig, load_maintenance_config
from mlpmem.maintenance.explain import explain_run, format_text
from mlpmem.maintenance.explain_html import check_outputs, write_html, write_json
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.probes import read_probes
from mlpmem.maintenance.update import update_run
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.utils.names import name_list


def open_run(folder: str, backbone: str | None = None, quiet: bool = False) -> Run:
    """The run in ``folder`` under the configuration it was built with (``backbone`` names another folder of its
    backbone, e.g. after a move; the datastore's fingerprint refuses a different model or tokenizer)."""
    config = RunLayout(Path(folder)).config
    if not config.is_file():
        raise MlpmemError(f"{folder} is not a finished run folder (it has no config.yaml): give the run_dir of a "
                          "run that `mlpmem run` built")
    overrides = [f"run_dir={folder}", *([f"backbone.name={backbone}"] if backbone else [])]
    return Run(PipelineConfig.from_yaml(config, overrides), progress=not quiet, config_file=config)


def _config(args: argparse.Namespace) -> MaintenanceConfig:
    return load_maintenance_config(args.config, args.set)


def update(args: argparse.Namespace) -> None:
    if args.add is None and not args.abort:
        raise MlpmemError("give the documents to add with --add DOCS (or --abort)")
    run = open_run(args.run, args.backbone, args.quiet)
    summary = update_run(run, args.add, _config(args), abort=args.abort)
    if args.abort:
        print("discarded the unfinished operation" if summary["discarded"] else "nothing to discard")
    elif not summary["changed"]:
        print(f"nothing to add: {summary['skipped']} document(s) already in the run, skipped; the run is unchanged")
    else:
        print(f"added {summary['added']} document(s) ({summary['rows_added']} positions, {summary['skipped']} "
              f"skipped as already in the run) in {summary['seconds']:.1f} s; fine-tuned {summary['tune_steps']} "
              f"steps on {summary['tune_rows']} rows")


def forget(args: argparse.Namespace) -> None:
    wanted = [] if args.docs is None else name_list(args.docs, "--docs", "document ids or names")
    run = open_run(args.run, args.backbone, args.quiet)
    probes = read_probes(args.probes) if args.probes else None
    summary = forget_run(run, wanted, _config(args), abort=args.abort, probes=probes)
    if args.abort:
        print("discarded the unfinished operation" if summary["discarded"] else "nothing to discard")
        return
    if not summary["changed"]:
        print(f"nothing to forget: {summary['skipped']} document(s) already forgotten, skipped; the run is unchanged")
        return
    skipped = f", {summary['skipped']} skipped as already forgotten" if summary["skipped"] else ""
    print(f"forgot {summary['forgotten']} document(s) ({summary['rows_removed']} positions, "
          f"{summary['teacher_shards_refreshed']} teacher shard(s) recomputed{skipped}) in {summary['seconds']:.1f} s; "
          f"fine-tuned {summary['tune_steps']} steps on {summary['tune_rows']} rows"
          + (f" ({summary['probes']} probe prompt(s))" if summary.get("probes") else ""))


def explain(args: argparse.Namespace) -> None:
    if not args.prompt.strip():
        raise MlpmemError("--prompt is empty: give the text to explain")
    if args.max_new_tokens < 0:
        raise MlpmemError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    check_outputs(args.html, args.json)
    run = open_run(args.run, args.backbone, args.quiet)
    explanation = explain_run(run, args.prompt, _config(args).explain, args.max_new_tokens)
    print(format_text(explanation))
    if args.html:
        print(f"\nhtml: {write_html(explanation, args.html)}")
    if args.json:
        write_json(explanation, args.json)
