"""The ``mlpmem`` command line, built from the table :data:`mlpmem.cli.table.COMMANDS`.

Nothing of a command is imported until it runs or shows its own help, so ``mlpmem --help`` and every group's
help load no model library. Old flat names (``bench-infer``, ``qa-report``, ...) are rewritten to the
grouped ones (``bench infer``, ``qa report``) before parsing and are never listed.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from mlpmem.cli.spec import PROG, Command, CommandParser, function, one_line_error
from mlpmem.cli.table import ALIASES, COMMANDS, GROUPS
from mlpmem.errors import MlpmemError

__all__ = ["build_parser", "canonical_argv", "main"]

DESCRIPTION = """MLP Memory: a retrieval-free parametric memory for causal LMs.

The pipeline: `mlpmem run CONFIG` runs every stage, or one stage at a time (datastore, knnlm, teacher, train,
eval); the experiments come in groups: `mlpmem qa|bench|mosaics COMMAND`. `mlpmem COMMAND --help` for each."""


def _commands(parser: CommandParser, title: str) -> argparse._SubParsersAction:
    return parser.add_subparsers(title=title, metavar="COMMAND", dest="command", required=True)


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each command's own arguments are added only when it is reached."""
    parser = CommandParser(prog=PROG, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    top = _commands(parser, "commands")
    groups: dict[str, argparse._SubParsersAction] = {}
    for command in COMMANDS:
        if command.group not in groups:
            if command.group:
                members = ", ".join(c.name for c in COMMANDS if c.group == command.group)
                summary = f"{GROUPS[command.group]} ({members})"
                group = top.add_parser(command.group, help=summary, description=summary)
                groups[command.group] = _commands(group, f"{command.group} commands")
            else:
                groups[""] = top
        groups[command.group].add_parser(command.name, help=command.help, description=command.help,
                                         command=command)
    return parser


def canonical_argv(argv: list[str]) -> list[str]:
    """``argv`` with an old flat command name replaced by the command's words (``bench-infer`` -> ``bench infer``)."""
    for i, word in enumerate(argv):
        if not word.startswith("-"):
            return [*argv[:i], *ALIASES.get(word, [word]), *argv[i + 1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    """Run one command; its errors are one line, ``mlpmem: error: ...``, and exit status 2."""
    argv = canonical_argv(list(sys.argv[1:] if argv is None else argv))
    args, unknown = build_parser().parse_known_args(argv)
    command: Command = args._command
    if unknown:
        one_line_error(f"unrecognized arguments: {' '.join(unknown)}", " ".join([PROG, *command.path]))
    args.command_line = shlex.join([PROG, *argv])
    try:
        function(command)(args)
    except MlpmemError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return 0
