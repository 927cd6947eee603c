"""The pipeline's commands that load no model: the shipped corpora, and one table over finished runs (every number
checked against the artifacts it describes)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from mlpmem.corpora import CORPORA, prepare
from mlpmem.errors import MlpmemError
from mlpmem.layout import RunLayout
from mlpmem.pipeline.records import check_shown
from mlpmem.reporting.run_report import SUMMARY_HEAD, summary_table, sweep_table
from mlpmem.utils.commit import is_pending, recover
from mlpmem.utils.lock import folder_lock
from mlpmem.utils.outputs import check_output_file, check_output_folder, write_output
from mlpmem.utils.shards import read_json, sha256_file, write_json

SWEEP_HEAD = b"# kNN-LM sweep on validation, "


def corpora(args: argparse.Namespace) -> None:
    for name, desc in CORPORA.items():
        print(f"{name:28s} {desc}")


def prepare_corpus(args: argparse.Namespace) -> None:
    print(prepare(args.name, seed=args.seed))


def summarize(args: argparse.Namespace) -> None:
    """Print (and with ``--out`` write) the summary table; ``--copy-reports`` copies each run's reports too."""
    out = check_output_file(args.out, "--out", SUMMARY_HEAD.encode()) if args.out else None
    copies = check_output_folder(args.copy_reports, "--copy-reports") if args.copy_reports else None
    check_distinct_runs(args.runs, copies is not None)
    for run_dir in map(Path, args.runs):
        if not run_dir.is_dir():
            raise MlpmemError(f"{run_dir} is not a run folder ({'a file' if run_dir.exists() else 'not found'})")
        if not RunLayout(run_dir).knnlm_results.is_file():
            raise MlpmemError(f"{run_dir} holds no finished run (no knnlm/results.json): run `mlpmem run` on it first")
        if is_pending(run_dir):
            with folder_lock(run_dir, args.command_line):
                recover(run_dir)
        check_shown(RunLayout(run_dir))
    table = summary_table(args.runs)
    print(table)
    if out is not None:
        write_output(out, (table + "\n").encode("utf-8"))
    if copies is not None:
        plans = {run_dir: copy_plan(run_dir, copies / run_dir.name) for run_dir in map(Path, args.runs)}
        for run_dir, plan in plans.items():
            copy_reports(run_dir, copies / run_dir.name, plan)


def check_distinct_runs(runs: list[str], copies: bool) -> None:
    """Refuse a run given twice, and with ``--copy-reports`` two runs of one folder name (one DIR/<run>/ each)."""
    seen: dict[str, str] = {}
    for run in runs:
        key = Path(run).name if copies else str(Path(run).resolve())
        if key in seen:
            why = f"share the folder name {key!r} (--copy-reports writes DIR/{key}/ once)" if copies else "are one run"
            raise MlpmemError(f"{seen[key]} and {run} {why}: give each run once")
        seen[key] = run


COPIES = "mlpmem-copies.json"
"""In ``DIR/<run>/`` of ``--copy-reports``: the sha256 of every file it copied there, written last."""


def copy_plan(run_dir: Path, dest: Path) -> list[tuple[Path, Path]]:
    """``(source, target)`` of every report, figure and ablation result of a run to copy into ``dest``; a target
    already there is replaced only if an earlier copy wrote it and it is unchanged since (:data:`COPIES`), else it is
    the user's: refused."""
    layout = RunLayout(run_dir)
    reports = [*run_dir.glob("*.md"), *run_dir.glob("*.png"), *run_dir.glob("ablations/*/results.*")]
    plan = [(f, dest / (f"ablation-{f.parent.name}{f.suffix}" if "ablations" in f.parts else f.name))
            for f in [*reports, *([layout.results] if layout.results.exists() else [])]]
    targets = [target for _, target in plan]
    if not layout.report.exists():  # a retrieval-only run: its kNN-LM sweep
        plan.append((layout.knnlm_results, dest / "knnlm-results.json"))
        targets += [dest / "knnlm-results.json", dest / "knnlm-sweep.md"]
    copied = read_json(dest / COPIES, "--copy-reports record") if (dest / COPIES).is_file() else {}
    for target in targets:
        check_output_file(target, "--copy-reports", b"")  # a folder, or a path under a file: one line
        if target.exists() and copied.get(target.name) != sha256_file(target):
            raise MlpmemError(f"--copy-reports {target}: refusing to replace it, it is not an earlier output of "
                              "--copy-reports (or it was changed since): give another DIR, or move that file away")
    return plan


def copy_reports(run_dir: Path, dest: Path, plan: list[tuple[Path, Path]]) -> None:
    """A run's reports, figures and ablation results (``plan``) into ``dest``, for the docs (``runs/`` is not
    versioned)."""
    dest.mkdir(parents=True, exist_ok=True)
    layout = RunLayout(run_dir)
    if not layout.report.exists():
        knn = read_json(layout.knnlm_results, "knnlm results")
        text = SWEEP_HEAD.decode() + f"`{run_dir}`\n\n" + sweep_table(knn) + "\n"
        write_output(dest / "knnlm-sweep.md", text.encode("utf-8"))
    for source, target in plan:
        shutil.copyfile(source, target)
    written = [target for _, target in plan] + ([] if layout.report.exists() else [dest / "knnlm-sweep.md"])
    write_json(dest / COPIES, {target.name: sha256_file(target) for target in written})
