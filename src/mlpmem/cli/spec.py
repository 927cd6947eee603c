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
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

PROG = "mlpmem"


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
    """One command: ``mlpmem [group] name``, the function it runs (given the parsed namespace), its help."""

    name: str
    group: str
    """``""`` for the pipeline's commands (``mlpmem run``), else the group (``mlpmem bench infer``)."""
    target: str
    """``"module:function"``; the function takes the ``argparse.Namespace``."""
    help: str
    args: tuple[Arg, ...] = ()
    aliases: tuple[str, ...] = ()
    """Old flat names (``bench-infer``) that still run this command; never listed."""

    @property
    def path(self) -> list[str]:
        return [self.group, self.name] if self.group else [self.name]


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


def one_line_error(message: str, prog: str) -> NoReturn:
    """Exit 2 with ``mlpmem: error: ...`` on one line, as every error of the CLI."""
    print(f"{PROG}: error: {message} (see `{prog} --help`)", file=sys.stderr)
    raise SystemExit(2)


class CommandParser(argparse.ArgumentParser):
    """A parser whose arguments are added from its :class:`Command` only when it parses or shows help."""

    def __init__(self, *args: Any, command: Command | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
        one_line_error(message, self.prog)


def function(command: Command) -> Callable[[argparse.Namespace], Any]:
    """The function a command runs (its module is imported now)."""
    return resolve(command.target)
