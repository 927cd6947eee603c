"""The commands ``python -m studies tasks list``, ``screen`` and ``prepare``, declared in
:mod:`studies.cli`."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from mlpmem.reporting.tables import markdown_table
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import write_json
from studies.tasks.catalog import SelectionRule, list_multiple_choice, rejection, source_counts
from studies.tasks.prepare import TasksConfig, prepare_tasks


def _given(args: argparse.Namespace, *names: str) -> dict:
    return {name: value for name in names if (value := getattr(args, name, None)) is not None}


def cmd_list(args: argparse.Namespace) -> None:
    """Every multiple-choice task of the archive with its size and the rule's verdict; ``--out``: also
    ``report.md`` and ``results.json`` there (every task, its verdict, the counts)."""
    infos = list_multiple_choice()
    rule = SelectionRule()
    verdicts = {i.name: rejection(i, rule) or "candidate" for i in infos}
    shown = infos if args.all else [i for i in infos if verdicts[i.name] == "candidate"]
    table = markdown_table(["task", "items", "choices", "input words", "longest choice words", "verdict"],
                           [[i.name, i.items, f"{i.choices:g}", f"{i.input_words:g}", f"{i.choice_words:g}",
                             verdicts[i.name]] for i in shown])
    counts = Counter(verdicts.values())
    summary = f"{len(infos)} multiple-choice tasks: " + ", ".join(f"{n} {why}" for why, n in counts.most_common())
    print(f"{table}\n\n{summary}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        command = "python -m studies tasks list" + (" --all" if args.all else "") + f" --out {args.out}"
        sources = source_counts()
        write_json(out / "results.json", {"command": command, "rule": asdict(rule), "counts": dict(counts),
                                          "tasks": [{**asdict(i), "verdict": verdicts[i.name]} for i in infos],
                                          "qa_sources": sources})
        sources_table = markdown_table(["task", "holds"], [[name, ", ".join(f"{n:,} {what}" for what, n in c.items())]
                                                           for name, c in sources.items()])
        (out / "report.md").write_text(f"# BIG-bench multiple-choice tasks and the selection rule\n\n`{command}`\n\n"
                                       f"{summary}\n\n{table}\n\n## The tasks the QA suite and the truthfulness "
                                       f"check read\n\n{sources_table}\n")


def cmd_screen(args: argparse.Namespace) -> None:
    from studies.tasks.screen import ScreenConfig, screen, screen_table

    set_threads()
    cfg = ScreenConfig(**_given(args, "out", "items", "mc_limit", "backbone", "batch_size", "seed"),
                       tasks=args.tasks or [])
    report = screen(cfg, progress=not args.quiet)
    print(screen_table(report))
    print(f"\nchosen ({len(report['chosen'])}): {','.join(report['chosen'])}")
    if len(report["chosen"]) < 9:
        print(f"only {len(report['chosen'])} candidates are above chance (one per task family)")
    screen = cfg.folder / "screen.json"
    print(f"screen: {screen}\nnext: python -m studies tasks prepare --screen {screen}")


def cmd_prepare(args: argparse.Namespace) -> None:
    options = _given(args, "out", "mc_limit", "qa_wikidata", "seed", "qa_config", "battery_limit", "detect_limit",
                     "preference_data", "mc_tasks", "truthfulness")
    if args.screen:
        from studies.tasks.screen import chosen_tasks

        options["mc_tasks"] = chosen_tasks(args.screen)
    info = prepare_tasks(TasksConfig(**options))
    print("| task | items |\n|---|---|")
    for name, n in info["items"].items():
        print(f"| {name} | {n} |")
    groups = ",".join(g for g, tasks in info["groups"].items() if tasks)
    counts = ", ".join(f"{g}: {len(tasks)} tasks" for g, tasks in info["groups"].items())
    print(f"\ntasks: {info['folder']}  (groups {counts})")
    print(f"next: mlpmem lm-eval --include-path {info['folder']} --local-only --tasks {groups} "
          f"--model-args run=RUN,method=backbone --log-samples --output base.json")
