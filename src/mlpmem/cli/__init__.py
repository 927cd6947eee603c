"""The ``mlpmem`` command line, built from the table :data:`mlpmem.cli.table.COMMANDS`.

Nothing of a command is imported until it runs or shows its own help, so ``mlpmem --help`` and every group's
help load no model library. Old flat names (``bench-infer``, ``qa-report``, ...) are rewritten to the
grouped ones (``bench infer``, ``qa report``) before parsing and are never listed. Every failure is one line
on stderr with a documented exit status (:mod:`mlpmem.cli.guard`); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from mlpmem.cli.guard import EXIT_CODES, one_line, unexpected
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
    """Run one command. Its errors are one line, ``mlpmem: error: ...``; the exit status says which kind
    (:data:`EXIT_CODES`). ``--debug`` (anywhere on the line) or ``MLPMEM_DEBUG=1`` shows the traceback instead."""
    argv = canonical_argv(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in argv or os.environ.get("MLPMEM_DEBUG", "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    args, unknown = build_parser().parse_known_args(argv)
    command: Command = args._command
    if unknown:
        one_line_error(f"unrecognized arguments: {' '.join(unknown)}", " ".join([PROG, *command.path]))
    args.command_line = shlex.join([PROG, *argv])
    try:
        function(command)(args)
    except MlpmemError as exc:
        if debug:
            raise
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{PROG}: interrupted; rerun the same command to resume (finished work is kept)", file=sys.stderr)
        return EXIT_CODES["interrupted"]
    except Exception as exc:  # noqa: BLE001 - the guard: any other failure is one line too, unless --debug
        if debug:
            raise
        print(f"{PROG}: error: {unexpected(exc, ' '.join(command.path))}", file=sys.stderr)
        return EXIT_CODES["unexpected"]
    return 0
