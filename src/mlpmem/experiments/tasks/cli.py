"""The commands ``mlpmem tasks list``, ``mlpmem tasks screen`` and ``mlpmem tasks prepare``, declared in
:mod:`mlpmem.cli.table`."""

from __future__ import annotations

import argparse
from collections import Counter

from mlpmem.experiments.tasks.catalog import SelectionRule, list_multiple_choice, rejection
from mlpmem.experiments.tasks.prepare import TasksConfig, prepare_tasks
from mlpmem.utils.runtime import set_threads


def _given(args: argparse.Namespace, *names: str) -> dict:
    return {name: value for name in names if (value := getattr(args, name, None)) is not None}


def cmd_list(args: argparse.Namespace) -> None:
    """Every multiple-choice task of the archive with its size and the rule's verdict."""
    infos = list_multiple_choice()
    rule = SelectionRule()
    shown = infos if args.all else [i for i in infos if rejection(i, rule) is None]
    print("| task | items | choices | input words | longest choice words | verdict |\n|---|---|---|---|---|---|")
    for info in shown:
        print(f"| {info.name} | {info.items} | {info.choices:g} | {info.input_words:g} | {info.choice_words:g} | "
              f"{rejection(info, rule) or 'candidate'} |")
    counts = Counter(rejection(i, rule) or "candidate" for i in infos)
    print(f"\n{len(infos)} multiple-choice tasks: " + ", ".join(f"{n} {why}" for why, n in counts.most_common()))


def cmd_screen(args: argparse.Namespace) -> None:
    from mlpmem.experiments.tasks.screen import ScreenConfig, screen, screen_table

    set_threads()
    cfg = ScreenConfig(**_given(args, "out", "items", "mc_limit", "backbone", "batch_size", "seed"),
                       tasks=args.tasks or [])
    report = screen(cfg, progress=not args.quiet)
    print(screen_table(report))
    print(f"\nchosen ({len(report['chosen'])}): {','.join(report['chosen'])}")
    if len(report["chosen"]) < 9:
        print(f"only {len(report['chosen'])} candidates are above chance (one per task family)")
    print(f"screen: {cfg.folder / 'screen.json'}\nnext: mlpmem tasks prepare --screen {cfg.folder / 'screen.json'}")


def cmd_prepare(args: argparse.Namespace) -> None:
    options = _given(args, "out", "mc_limit", "qa_wikidata", "seed", "qa_config")
    if args.screen:
        from mlpmem.experiments.tasks.screen import chosen_tasks

        options["mc_tasks"] = chosen_tasks(args.screen)
    if args.mc_tasks is not None:
        options["mc_tasks"] = args.mc_tasks
    if "mc_tasks" not in options:
        print("multiple-choice tasks: the nine chosen before any screen (mlpmem tasks screen measures them)")
    if args.no_qa:
        options["qa_config"] = None
    if args.no_truthfulness:
        options["truthfulness"] = []
    info = prepare_tasks(TasksConfig(**options))
    print("| task | items |\n|---|---|")
    for name, n in info["items"].items():
        print(f"| {name} | {n} |")
    groups = ",".join(g for g, tasks in info["groups"].items() if tasks)
    counts = ", ".join(f"{g}: {len(tasks)} tasks" for g, tasks in info["groups"].items())
    print(f"\ntasks: {info['folder']}  (groups {counts})")
    print(f"next: mlpmem lm-eval --include-path {info['folder']} --local-only --tasks {groups} "
          f"--model-args run=RUN,method=backbone --log-samples --output base.json")
