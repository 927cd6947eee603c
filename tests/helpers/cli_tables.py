"""Checks every command table (mlpmem's, the studies', Memory Mosaics') must pass, written once."""

from __future__ import annotations

import pytest

from mlpmem.cli.spec import function


def assert_command_resolves(main, command, program: str, capsys) -> None:
    """The command's function imports and is callable; its help (choices and defaults read from the code)
    renders under ``program``."""
    assert callable(function(command))
    with pytest.raises(SystemExit) as exc:
        main([*command.path, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {program} {' '.join(command.path)}") and command.help in out


def assert_no_help_repeats_a_default(command) -> None:
    for arg in command.args:
        if "default" in arg.options or arg.default_from:
            assert "(default" not in arg.options.get("help", ""), (command.path, arg.flags)
