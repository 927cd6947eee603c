"""``python -m studies``: every command of its table resolves and shows its help, usage errors are one line, and
its help imports no model library."""

import subprocess
import sys

import pytest

from helpers.cli_tables import assert_command_resolves, assert_no_help_repeats_a_default
from helpers.paths import ROOT
from studies.cli import COMMANDS, main

LIGHT = """
import contextlib, io, sys
from mlpmem.cli.spec import build_parser, run
from studies.cli import PROGRAM
build_parser(PROGRAM)
for words in ([], ["qa"], ["bench"], ["tasks"]):
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        run(PROGRAM, [*words, "--help"])
heavy = ("torch", "transformers", "numpy", "faiss", "matplotlib", "mlpmem.backbone", "mlpmem.pipeline.config")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
"""


def test_help_of_the_cli_and_its_groups_imports_no_model_library():
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_python_m_studies_runs_from_the_repository_root():
    out = subprocess.run([sys.executable, "-m", "studies", "qa", "report", "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m studies qa report"), out.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.path))
def test_every_command_of_the_table_resolves(command, capsys):
    assert_command_resolves(main, command, "python -m studies", capsys)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.path))
def test_no_help_text_repeats_a_default(command):
    assert_no_help_repeats_a_default(command)


@pytest.mark.parametrize("argv", [[], ["nope"], ["bench"], ["ablate", "c.yaml"], ["bench", "infer", "--threads", "x"],
                                  ["run", "c.yaml"]])
def test_usage_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("python -m studies: error:") and err.count("\n") == 1, err
