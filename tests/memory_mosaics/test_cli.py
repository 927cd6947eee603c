"""The ``memory-mosaics`` command line: light help, every command resolves, one-line usage errors; a saved model
is unknown to plain mlpmem until the package's model is imported (``from memory_mosaics import ...``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.cli_tables import assert_command_resolves
from memory_mosaics.cli import COMMANDS, main

LIGHT = """
import contextlib, io, sys
from memory_mosaics.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])
heavy = ("torch", "transformers", "numpy", "mlpmem.backbone", "memory_mosaics.model")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
"""


def test_help_imports_no_model_library():
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_command_resolves_and_shows_its_help(command, capsys):
    assert_command_resolves(main, command, "memory-mosaics", capsys)


@pytest.mark.parametrize("argv", [[], ["nope"], ["train"], ["recall", "--steps", "x"], ["train", "small", "--bogus"]])
def test_usage_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("memory-mosaics: error:") and err.count("\n") == 1, err


def test_a_bad_preset_name_is_a_one_line_error(capsys):
    assert main(["eval", "smal"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memory-mosaics: error: config 'smal' is neither a YAML file path") and \
        err.count("\n") == 1, err


LOAD = """
import sys
from mlpmem.backbone import load_backbone
from mlpmem.errors import MlpmemError
try:
    load_backbone(sys.argv[1])
except MlpmemError as exc:
    print(exc)
import memory_mosaics
assert "memory_mosaics.model" not in sys.modules
from memory_mosaics import MosaicsForCausalLM  # the model's import registers its type
model, _ = load_backbone(sys.argv[1])
print(type(model).__name__, isinstance(model, MosaicsForCausalLM))
"""


def test_plain_mlpmem_names_the_unknown_model_type_and_loads_it_once_imported(tmp_path, tiny_tokenizer):
    from memory_mosaics.config import MosaicsConfig
    from memory_mosaics.model import MosaicsForCausalLM

    config = MosaicsConfig(vocab_size=len(tiny_tokenizer), hidden_size=16, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=32, short_window=4, long_gap_min=2,
                           long_gap_max=4, long_gap_eval=2, scan_chunk=4)
    MosaicsForCausalLM(config).save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    out = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    refused, loaded = out.stdout.strip().splitlines()
    assert refused == (f"model type 'memory_mosaics_v2' of {tmp_path} is unknown to transformers: import the "
                       "package that registers it with the Auto classes before loading")
    assert loaded == "MosaicsForCausalLM True"
