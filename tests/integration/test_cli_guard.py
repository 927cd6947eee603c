"""The CLI guard: every user mistake is one line naming its cause, with a documented exit status; an unexpected
failure is one line too (what, where, how to see more), and ``--debug`` shows the traceback."""

from __future__ import annotations

import re

import pytest

import mlpmem.cli.stages
from helpers.corpus import write_corpus
from helpers.paths import ROOT
from helpers.runs import overridden
from mlpmem.cli import main
from mlpmem.cli.guard import EXIT_CODES
from mlpmem.errors import ConfigError
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.pipeline.config import PipelineConfig

TINY = "tiny"


def error_line(capsys, code: int, *words) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mlpmem: error:"), err
    for word in words:
        assert word in err, (word, err)
    return err


def run_cli(argv) -> int:
    """``main(argv)``'s status, whether it returns it or exits with it (argparse's usage errors)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.fixture()
def base(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "corpus", 4)
    return [TINY, "--quiet", "--set", f"run_dir={tmp_path / 'run'}", "--set", f"backbone.name={tiny_backbone_dir}",
            "--set", f"corpus.path={corpus}"]


CASES = {
    "missing corpus.path": (["datastore", "{base}", "--set", "corpus.path={tmp}/nowhere"], "corpus.path"),
    "run_dir=123": (["datastore", "{base}", "--set", "run_dir=123"], "run_dir must be str"),
    "train=5": (["run", "{base}", "--set", "train=5"], "train is a section"),
    "backbone=PATH": (["datastore", "{base}", "--set", "backbone={tmp}"], "backbone is a section"),
    "list YAML with --set": (["datastore", "{tmp}/list.yaml", "--set", "seed=1"], "must hold a mapping"),
    "a folder as the config": (["datastore", "{tmp}"], "is a folder, not a YAML file"),
    "backbone.layer=top": (["datastore", "{base}", "--set", "backbone.layer=top"], "backbone.layer must be int"),
    "train.batch_size=2.5 --rebuild": (["train", "{base}", "--set", "train.batch_size=2.5", "--rebuild"],
                                       "train.batch_size must be int"),
    "seed=0.5": (["run", "{base}", "--set", "seed=0.5"], "seed must be int"),
    "seed=abc": (["run", "{base}", "--set", "seed=abc"], "seed must be int"),
    "train.epochs=1.5": (["run", "{base}", "--set", "train.epochs=1.5"], "train.epochs must be int"),
    "an empty YAML": (["run", "{tmp}/empty.yaml"], "is empty"),
    "generate --prompt ''": (["generate", "{base}", "--prompt", ""], "--prompt is empty"),
    "--max-new-tokens 0": (["generate", "{base}", "--prompt", "The", "--max-new-tokens", "0"], "--max-new-tokens"),
    "--max-new-tokens -1": (["generate", "{base}", "--prompt", "The", "--max-new-tokens", "-1"], "--max-new-tokens"),
    "run_dir an existing file": (["datastore", "{base}", "--set", "run_dir={tmp}/a-file"], "existing file"),
    "summarize a file": (["summarize", "{tmp}/a-file"], "not a run folder"),
    "summarize an empty folder": (["summarize", "{tmp}"], "no finished run"),
    "missing local backbone folder": (["datastore", "{base}", "--set", "backbone.name={tmp}/no-model"],
                                      "no such model folder"),
    "generate before any run": (["generate", "{base}", "--prompt", "The"], "memory", "missing", "mlpmem train"),
    "train before the teacher": (["train", "{base}"], "missing", "mlpmem datastore"),
    "lambda grid out of range": (["knnlm", "{base}", "--set", "knnlm.lambda_grid=[0.1, 2.0]"], "[0, 1]"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_every_user_mistake_is_one_line(case, base, tmp_path, capsys):
    argv, *words = CASES[case]
    (tmp_path / "list.yaml").write_text("- [a, b]\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "a-file").write_text("x")
    words = [w.format(tmp=tmp_path) for w in words]
    expanded = []
    for word in argv:
        expanded.extend(overridden(base, argv) if word == "{base}" else [word.format(tmp=tmp_path)])
    before = sorted(p.name for p in tmp_path.iterdir())
    assert run_cli(expanded) == EXIT_CODES["error"]
    error_line(capsys, 2, *words)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "run") == [n for n in before if n != "run"]
    assert (tmp_path / "a-file").read_text() == "x"


def test_yaml_1e_3_is_the_float_it_means_and_a_bad_key_is_named(tmp_path):
    cfg = PipelineConfig.from_yaml(TINY, ["train.lr=1e-3"])
    assert cfg.train.lr == 0.001
    with pytest.raises(ConfigError, match="train.lr"):
        PipelineConfig.from_yaml(TINY, ["train.lr=fast"])


def test_a_corrupt_shard_of_a_finished_datastore_says_how_to_repair_it(base, tmp_path, capsys):
    assert main(["datastore", *base]) == 0
    shard = sorted((tmp_path / "run" / "datastore").glob("keys-*.npy"))[0]
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x10
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["knnlm", *base]) == 2
    error_line(capsys, 2, shard.name, "checksum", "--rebuild")


@pytest.mark.parametrize("lam", [True, "0.3", None, [0.3]])
def test_the_python_api_refuses_a_lambda_that_is_no_number(lam, tiny_llama):
    memory = MLPMemory(MemoryConfig(input_size=32, vocab_size=tiny_llama.config.vocab_size, intermediate_size=8,
                                    num_layers=1, tie_head=False))
    keys = dict(key_layer=-1, key_site="ffn_input")
    with pytest.raises(ConfigError, match="real number in"):
        MemoryAugmentedForCausalLM.from_parts(tiny_llama, memory, lam=lam, **keys)
    mixed = MemoryAugmentedForCausalLM.from_parts(tiny_llama, memory, lam=0.3, **keys)
    assert mixed.lam == 0.3
    with pytest.raises(ConfigError, match="real number in"):
        mixed.lam = lam


def test_an_unexpected_failure_is_one_line_and_debug_shows_the_traceback(base, monkeypatch, capsys):
    def broken(run, stage, rebuild=False):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(mlpmem.cli.stages, "run_stage", broken)
    assert main(["datastore", *base]) == EXIT_CODES["unexpected"]
    err = error_line(capsys, 1, "`mlpmem datastore` failed", "RuntimeError: boom second line", "--debug")
    assert re.search(r"at mlpmem/cli/stages\.py:\d+ in _stage\)", err)  # the innermost frame of mlpmem
    with pytest.raises(RuntimeError, match="boom"):
        main(["datastore", *base, "--debug"])
    monkeypatch.setenv("MLPMEM_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["datastore", *base])


def test_ctrl_c_is_one_line_and_its_own_status(base, monkeypatch, capsys):
    def interrupted(run, stage, rebuild=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(mlpmem.cli.stages, "run_stage", interrupted)
    assert main(["datastore", *base]) == EXIT_CODES["interrupted"] == 130
    assert "interrupted" in capsys.readouterr().err


def test_readme_documents_the_exit_codes_and_debug():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Errors and exit codes"):]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    for code in EXIT_CODES.values():
        assert f"| {code} |" in section, code
    assert "--debug" in section
