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
from mlpmem.reporting.run_report import summary_table, sweep_table
from mlpmem.utils.commit import is_pending, recover
from mlpmem.utils.lock import folder_lock
from mlpmem.utils.shards import read_json


def corpora(args: argparse.Namespace) -> None:
    for name, desc in CORPORA.items():
        print(f"{name:28s} {desc}")


def prepare_corpus(args: argparse.Namespace) -> None:
    print(prepare(args.name, seed=args.seed))


def summarize(args: argparse.Namespace) -> None:
    """Print (and with ``--out`` write) the summary table; ``--copy-reports`` copies each run's reports too."""
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
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table + "\n")
    if args.copy_reports:
        for run_dir in map(Path, args.runs):
            copy_reports(run_dir, Path(args.copy_reports) / run_dir.name)


def copy_reports(run_dir: Path, dest: Path) -> None:
    """A run's reports, figures and ablation results into ``dest``, for the docs (``runs/`` is not versioned)."""
    dest.mkdir(parents=True, exist_ok=True)
    layout = RunLayout(run_dir)
    if not layout.report.exists():  # a retrieval-only run: its kNN-LM sweep
        knn = read_json(layout.knnlm_results, "knnlm results")
        (dest / "knnlm-sweep.md").write_text(f"# kNN-LM sweep on validation, `{run_dir}`\n\n" + sweep_table(knn) + "\n")
        shutil.copyfile(layout.knnlm_results, dest / "knnlm-results.json")
    reports = [*run_dir.glob("*.md"), *run_dir.glob("*.png"), *run_dir.glob("ablations/*/results.*")]
    for f in [*reports, *([layout.results] if layout.results.exists() else [])]:
        target = dest / (f"ablation-{f.parent.name}{f.suffix}" if "ablations" in f.parts else f.name)
        shutil.copyfile(f, target)
