"""How a command of the table is declared and turned into an argparse parser, without importing its code.

A :class:`Command` names its function as a ``"module:function"`` string and declares its arguments as
:class:`Arg` data. Nothing is imported until a command is run or its own ``--help`` is shown: the parser of a
command is filled only when argparse reaches it (:class:`CommandParser`), so building the whole tree and
``mlpmem --help`` stay light.

Two options of :class:`Arg` are references, resolved at that moment:

- ``choices="module:NAME"``: the allowed values are a constant of the code that uses them;
- ``default_from="module:Name[.attr...]"``: the default is the one of a config dataclass field (an instance
  with its defaults is made) or of a function parameter. The option's value stays ``None`` when it is not
  given, so the code keeps its own default; help shows that default.

A default given in the table (``default=...``) is shown in help too: no help text repeats a default.

A :class:`Program` is a whole command line (its name, description, commands and groups): ``mlpmem`` is one
(:mod:`mlpmem.cli`), the studies' ``python -m studies`` another. :func:`build_parser` turns it into the argparse
tree and :func:`run` parses a command line and runs its command behind the guard (:mod:`mlpmem.cli.guard`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from mlpmem.cli.guard import EXIT_CODES, machine_limit, one_line, unexpected
from mlpmem.errors import MlpmemError


class Arg:
    """One argument: the flags and options of ``ArgumentParser.add_argument``, plus ``default_from``."""

    def __init__(self, *flags: str, default_from: str | None = None, **options: Any) -> None:
        self.flags = flags
        self.default_from = default_from
        self.options = options

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        options = dict(self.options)
        if isinstance(options.get("choices"), str):
            options["choices"] = resolve(options["choices"])
        action = parser.add_argument(*self.flags, **options)
        shown = config_default(self.default_from, action.dest) if self.default_from else action.default
        if action.help and _meaningful(shown) and "%(default)" not in action.help:
            action.help += " (default: " + show(shown).replace("%", "%%") + ")"


@dataclass(frozen=True)
class Command:
    """One command: ``PROGRAM [group] name``, the function it runs (given the parsed namespace), its help."""

    name: str
    group: str
    """``""`` for the pipeline's commands (``mlpmem run``), else the group (``python -m studies bench infer``)."""
    target: str
    """``"module:function"``; the function takes the ``argparse.Namespace``."""
    help: str
    args: tuple[Arg, ...] = ()

    @property
    def path(self) -> list[str]:
        return [self.group, self.name] if self.group else [self.name]


def comma_ints(text: str) -> list[int]:
    """An option's ``N,N,...`` as integers (``type=comma_ints``)."""
    return [int(x) for x in text.split(",") if x]


def comma_names(text: str) -> list[str]:
    """An option's ``A,B,...`` as names (``type=comma_names``); an empty string is no names."""
    return text.split(",") if text else []


def resolve(ref: str) -> Any:
    """The object a ``"package.module:name"`` reference names (the module is imported now)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def config_default(ref: str, dest: str) -> Any:
    """The default of ``dest`` in a config class or a function (``module:Name``), or at ``module:Name.a.b``."""
    module, _, path = ref.partition(":")
    name, *attrs = path.split(".")
    owner = resolve(f"{module}:{name}")
    if inspect.isclass(owner):
        value = owner()
        for attr in attrs or [dest]:
            value = getattr(value, attr)
        return value
    return inspect.signature(owner).parameters[attrs[0] if attrs else dest].default


def _meaningful(default: Any) -> bool:
    """A default worth showing: not absent (None, a flag's False, an empty list)."""
    return not (default is None or default is False or default is argparse.SUPPRESS or default == [])


def show(value: Any) -> str:
    """A default as a user types it: lists comma-separated, large integers with thousands separators."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def one_line_error(message: str, program: str, prog: str) -> NoReturn:
    """Exit 2 with ``PROGRAM: error: ...`` on one line, as every error of the CLI (``prog``: the command's words)."""
    print(f"{program}: error: {message} (see `{prog} --help`)", file=sys.stderr)
    raise SystemExit(2)


class CommandParser(argparse.ArgumentParser):
    """A parser whose arguments are added from its :class:`Command` only when it parses or shows help."""

    def __init__(self, *args: Any, program: str, command: Command | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.program = program
        self._pending = command

    def _fill(self) -> None:
        if self._pending is not None:
            command, self._pending = self._pending, None
            for arg in command.args:
                arg.add_to(self)
            self.set_defaults(_command=command)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self._fill()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._fill()
        return super().format_usage()

    def format_help(self) -> str:
        self._fill()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        one_line_error(message, self.program, self.prog)


def function(command: Command) -> Callable[[argparse.Namespace], Any]:
    """The function a command runs (its module is imported now)."""
    return resolve(command.target)


@dataclass(frozen=True)
class Program:
    """A whole command line: ``name`` (as typed: ``mlpmem``, ``python -m studies``), its help, its commands and the
    help of each group (``""``: the commands without a group)."""

    name: str
    description: str
    commands: tuple[Command, ...]
    groups: dict[str, str]


def _commands(parser: CommandParser, title: str) -> argparse._SubParsersAction:
    return parser.add_subparsers(title=title, metavar="COMMAND", dest="command", required=True)


def build_parser(program: Program) -> CommandParser:
    """The whole command tree; each command's own arguments are added only when it is reached."""
    parser = CommandParser(prog=program.name, program=program.name, description=program.description,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    top = _commands(parser, "commands")
    groups: dict[str, argparse._SubParsersAction] = {"": top}
    for command in program.commands:
        if command.group not in groups:
            members = ", ".join(c.name for c in program.commands if c.group == command.group)
            summary = f"{program.groups[command.group]} ({members})"
            group = top.add_parser(command.group, help=summary, description=summary, program=program.name)
            groups[command.group] = _commands(group, f"{command.group} commands")
        groups[command.group].add_parser(command.name, help=command.help, description=command.help,
                                         program=program.name, command=command)
    return parser


def run(program: Program, argv: list[str] | None = None) -> int:
    """Run one command of ``program``. Its errors are one line, ``PROGRAM: error: ...``; the exit status says which
    kind (:data:`~mlpmem.cli.guard.EXIT_CODES`). ``--debug`` (anywhere on the line) or ``MLPMEM_DEBUG=1`` shows the
    traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("MLPMEM_DEBUG", "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    args, unknown = build_parser(program).parse_known_args(argv)
    command: Command = args._command
    words = " ".join([program.name, *command.path])
    if unknown:
        one_line_error(f"unrecognized arguments: {' '.join(unknown)}", program.name, words)
    args.command_line = " ".join([program.name, shlex.join(argv)])
    try:
        function(command)(args)
    except MlpmemError as exc:
        if debug:
            raise
        print(f"{program.name}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{program.name}: interrupted; rerun the same command to resume (finished work is kept)",
              file=sys.stderr)
        return EXIT_CODES["interrupted"]
    except Exception as exc:  # noqa: BLE001 - the guard: any other failure is one line too, unless --debug
        if debug:
            raise
        limit = machine_limit(exc)
        print(f"{program.name}: error: {limit or unexpected(exc, words)}", file=sys.stderr)
        return EXIT_CODES["error" if limit else "unexpected"]
    return 0
