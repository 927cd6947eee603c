"""The ``mlpmem`` command line, built from the table :data:`mlpmem.cli.table.COMMANDS`.

Nothing of a command is imported until it runs or shows its own help, so ``mlpmem --help`` loads no model library.
Every failure is one line on stderr with a documented exit status (:mod:`mlpmem.cli.guard`); ``--debug`` shows the
traceback.
"""

from __future__ import annotations

from mlpmem.cli import spec
from mlpmem.cli.table import COMMANDS, GROUPS

__all__ = ["PROGRAM", "build_parser", "main"]

DESCRIPTION = """MLP Memory: a retrieval-free parametric memory for causal LMs.

The pipeline: `mlpmem run CONFIG` runs every stage, or one stage at a time (datastore, knnlm, teacher, train,
eval); then use, maintain and evaluate a finished run. `mlpmem COMMAND --help` for each."""

PROGRAM = spec.Program("mlpmem", DESCRIPTION, tuple(COMMANDS), GROUPS)


def build_parser() -> spec.CommandParser:
    """The whole command tree; each command's own arguments are added only when it is reached."""
    return spec.build_parser(PROGRAM)


def main(argv: list[str] | None = None) -> int:
    """Run one ``mlpmem`` command (see :func:`mlpmem.cli.spec.run`)."""
    return spec.run(PROGRAM, argv)
