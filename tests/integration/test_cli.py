import json
import subprocess
import sys

import pytest

from helpers.cli_tables import assert_command_resolves, assert_no_help_repeats_a_default
from helpers.corpus import write_corpus
from helpers.paths import ROOT
from mlpmem.cli import main
from mlpmem.cli.table import COMMANDS
from mlpmem.errors import ConfigError
from mlpmem.pipeline.config import PipelineConfig
from studies.cli import main as studies_main


def test_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("corpus: {stride: 0}\n")
    with pytest.raises(ConfigError, match="stride"):
        PipelineConfig.from_yaml(bad)
    bad.write_text("teacher: {kk: 3}\n")
    with pytest.raises(ConfigError, match="unknown config key"):
        PipelineConfig.from_yaml(bad)
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        PipelineConfig.from_yaml(bad)


@pytest.fixture()
def tiny_run(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "corpus", 10)
    return ["tiny", "--quiet", "--set", f"run_dir={tmp_path / 'run'}",
            "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus}"]


def test_cli_runs_end_to_end(tiny_run, tmp_path, capsys):
    assert main(["run", *tiny_run]) == 0
    out = capsys.readouterr().out
    assert "test PPL backbone → kNN-LM" in out
    results = json.loads((tmp_path / "run" / "knnlm" / "results.json").read_text())
    assert results["chosen"]["k"] in (4, 8)
    assert results["test"]["knnlm_ppl"] <= results["test"]["backbone_ppl"] * 1.5
    assert "MLP Memory + backbone" in out and "tokens holding 80 %" in out
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert 0 <= res["lambda"] <= 1 and res["test"]["memory+backbone"] <= res["test"]["backbone"] + 1e-9 or \
        res["validation_curve"]["0.0"] < min(v for k, v in res["validation_curve"].items() if k != "0.0")
    test = res["test"]  # the backbone over the positions the memory's head covers: all of them at coverage 1
    assert (test["backbone_covered"] == test["backbone"]) == (test["memory_coverage"] == 1.0)
    assert (tmp_path / "run" / "lambda.png").stat().st_size > 1000
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 1000
    assert "](learning_curve.png)" in (tmp_path / "run" / "report.md").read_text()
    assert (tmp_path / "run" / "report.md").read_text().count("|") > 20
    (tmp_path / "run" / "report.md").unlink()
    assert main(["report", *tiny_run]) == 0 and (tmp_path / "run" / "report.md").exists()
    # the stages are idempotent: running again reuses everything
    assert main(["teacher", *tiny_run]) == 0
    assert "teacher:" in capsys.readouterr().out
    assert main(["generate", *tiny_run, "--prompt", "The keeper", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("The keeper")
    assert studies_main(["ablate", *tiny_run, "--study", "head-init", "--set", "train.epochs=1"]) == 0
    rows = json.loads((tmp_path / "run" / "ablations" / "head-init" / "results.json").read_text())["rows"]
    assert [r["tie_head"] for r in rows] == [True, True, False, False]
    assert rows[0]["trainable_parameters"] < rows[2]["trainable_parameters"]  # a tied head is frozen
    assert (tmp_path / "run" / "ablations" / "head-init" / "results.png").exists()
    assert main(["summarize", str(tmp_path / "run"), "--out", str(tmp_path / "s.md"),
                 "--copy-reports", str(tmp_path / "docs")]) == 0
    assert "| run |" in (tmp_path / "s.md").read_text()
    assert (tmp_path / "docs" / "run" / "report.md").exists()
    assert (tmp_path / "docs" / "run" / "ablation-head-init.md").exists()
    capsys.readouterr()
    assert main(["generate", *tiny_run, "--prompt", "The keeper", "--lam", "1.5"]) == 2
    assert "[0, 1]" in capsys.readouterr().err


def test_cli_errors_are_one_line(tiny_run, capsys):
    assert main(["knnlm", *tiny_run, "--set", "knnlm.lambda_grid=[0.1, 2.0]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlpmem: error:") and "[0, 1]" in err and "\n" not in err
    assert main(["run", *tiny_run, "--set", "teacher.k=100000"]) == 2
    assert "smaller than the datastore" in capsys.readouterr().err


def test_cli_empty_corpus(tmp_path, tiny_backbone_dir, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("")
    code = main(["datastore", "tiny", "--quiet", "--set", f"run_dir={tmp_path / 'r'}",
                 "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus}"])
    assert code == 2 and "empty" in capsys.readouterr().err


def test_cli_corpus_shorter_than_one_block(tmp_path, tiny_backbone_dir, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The keeper.")
    code = main(["datastore", "tiny", "--quiet", "--set", f"run_dir={tmp_path / 'r'}",
                 "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus}",
                 "--set", "corpus.validation_fraction=0", "--set", "corpus.test_fraction=0"])
    assert code == 2 and "shorter than one block" in capsys.readouterr().err


LIGHT = """
import contextlib, io, sys
from mlpmem.cli import build_parser, main
build_parser()
for words in ([],):
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        main([*words, "--help"])
heavy = ("torch", "transformers", "numpy", "faiss", "matplotlib", "mlpmem.backbone", "mlpmem.pipeline.config")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
"""


def test_help_of_the_cli_and_its_groups_imports_no_model_library():
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.path))
def test_every_command_of_the_table_resolves(command, capsys):
    assert_command_resolves(main, command, "mlpmem", capsys)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.path))
def test_no_help_text_repeats_a_default(command):
    assert_no_help_repeats_a_default(command)


@pytest.mark.parametrize("argv", [[], ["nope"], ["bench"], ["run", "c.yaml", "--bogus"],
                                  ["summarize", "r", "--bogus"], ["generate", "c.yaml"], ["qa", "report"]])
def test_usage_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("mlpmem: error:") and err.count("\n") == 1, err


def test_readme_lists_every_command():
    readme = (ROOT / "README.md").read_text()
    assert not [c.path for c in COMMANDS if f"`mlpmem {' '.join(c.path)}`" not in readme]
