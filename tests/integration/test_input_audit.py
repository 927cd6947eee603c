"""Issue 50, item 8: every key, separator and name a user gives is taken exactly or refused in one line (exit 2), and
a refused command leaves every file as it was. The rest of the bad-input matrix is ``test_run_mistakes.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import tree_digest
from helpers.runs import copy_run
from mlpmem.cli import main
from mlpmem.errors import ConfigError
from mlpmem.pipeline.config import PipelineConfig


@pytest.fixture(scope="module")
def run(tiny_run, tmp_path_factory) -> Path:
    """One copy of the tiny run for the whole module: every command here is refused, or writes outside it."""
    return copy_run(tiny_run, tmp_path_factory.mktemp("audit") / "run")


def refused(capsys, code: int, *words: str) -> str:
    """The command exited 2 with one line on stderr (notes aside) holding ``words``."""
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not line.startswith("note:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mlpmem: error:"), (code, err)
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


# --- --set KEY=VALUE and YAML configs -------------------------------------------------------------------------


@pytest.mark.parametrize("items, words", [
    (["train.lr="], ["'train.lr=' has no value", "null"]),
    (["train=3"], ["train is a section", "train.KEY=VALUE"]),
    (["train.epochs=2", "train.epochs=2"], ["--set train.epochs is given twice"]),
    (["train.epoch=2"], ["['epoch'] in train", "did you mean 'epochs'"]),
    (["train. epochs=2"], ["[' epochs'] in train"]),
])
def test_a_set_is_taken_exactly_or_refused(run, capsys, items, words):
    before = tree_digest(run)
    refused(capsys, main(["eval", str(run / "config.yaml"), "--quiet", *sets(*items)]), *words)
    assert tree_digest(run) == before


def test_a_maintenance_set_given_twice_is_refused(run, capsys):
    before = tree_digest(run)
    code = main(["forget", str(run), "--docs", "doc3", "--quiet", *sets("forget.epochs=1", "forget.epochs=2")])
    refused(capsys, code, "--set forget.epochs is given twice")
    assert tree_digest(run) == before


def test_a_section_given_as_a_mapping_keeps_the_files_other_keys(run):
    config = run / "config.yaml"
    cfg = PipelineConfig.from_yaml(config, ["train={epochs: 5}"])
    assert cfg.train.epochs == 5 and cfg.train.to_dict() == {**PipelineConfig.from_yaml(config).train.to_dict(),
                                                              "epochs": 5}
    assert PipelineConfig.from_yaml(config).train.batch_size != PipelineConfig().train.batch_size  # a real check


def test_yaml_keys_that_are_not_names_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("1: x\nfoo: y\n")
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['foo', 1\] in root"):
        PipelineConfig.from_yaml(bad)


# --- comma-separated names: --docs, --tasks, --methods, --names ---------------------------------------------------


@pytest.mark.parametrize("docs, words", [
    ("doc3, doc4", ["' doc4' has a space at an end"]),
    ("doc3,doc3", ["names 'doc3' twice"]),
    ("", ["--docs is empty"]),
    ("doc3,,doc4", ["empty name"]),
    ("doc3,nope", ["no document 'nope' in the run"]),
])
def test_forget_takes_each_name_exactly(run, capsys, docs, words):
    before = tree_digest(run)
    refused(capsys, main(["forget", str(run), "--docs", docs, "--quiet"]), *words)
    assert tree_digest(run) == before and not (run / "maintenance").exists()


@pytest.mark.parametrize("extra, words", [
    (["--tasks", "tiny_ll, tiny_roll"], ["' tiny_roll' has a space"]),
    (["--tasks", "tiny_ll,tiny_ll"], ["names 'tiny_ll' twice"]),
    (["--tasks", "tiny_ll", "--methods", "memory,memory"], ["--methods", "names 'memory' twice"]),
])
def test_lm_eval_takes_each_task_exactly(run, capsys, monkeypatch, extra, words):
    import mlpmem.evaluation.harness as harness

    monkeypatch.setattr(harness, "evaluate", lambda *a, **k: pytest.fail("scored before its arguments were checked"))
    refused(capsys, main(["lm-eval", "--model-args", f"run={run}", *extra]), *words)


@pytest.mark.parametrize("extra, words", [
    (["--names", ""], ["--names is empty"]),
    (["--names", "a,,b"], ["empty name"]),
    (["--tasks", ""], ["--tasks is empty"]),
    (["--tasks", "t,t"], ["names 't' twice"]),
])
def test_compare_takes_each_name_exactly(tmp_path, capsys, extra, words):
    for name in ("base", "a", "b"):
        (tmp_path / f"{name}.json").write_text("{}")
    files = [str(tmp_path / f"{name}.json") for name in ("base", "a", "b")]
    code = main(["compare", "--base", files[0], "--method", files[1], "--method", files[2], *extra])
    refused(capsys, code, *words)


# --- update --add: each document taken as given -----------------------------------------------------------------

ALPHA, BETA = "Alpha harbour boats sail at dawn past the breakwater.", "Beta gulls circle the mast above the quay."


@pytest.mark.parametrize("records, words", [
    ([{"id": 5, "text": ALPHA}], ["new.jsonl:1", "field 'id' must be a non-empty string", "got 5"]),
    ([{"id": None, "text": ALPHA}], ["field 'id' must be a non-empty string", "got None"]),
    ([{"id": "", "text": ALPHA}], ["field 'id' must be a non-empty string"]),
    ([{"id": "x", "text": "  "}], ["document 'x' has a blank text"]),
    ([{"id": "a", "text": ALPHA}, {"id": "a", "text": BETA}], ["the name 'a' is given to two texts"]),
    ([{"id": "a", "text": ALPHA}, {"id": "b", "text": ALPHA}], ["documents 'a' and 'b' have the same text"]),
    ([{"id": "doc3", "text": ALPHA}], ["'doc3' has the name or id of a document the run holds"]),
])
def test_update_takes_each_document_as_given(run, tmp_path, capsys, records, words):
    from mlpmem.utils.io import write_jsonl

    write_jsonl(tmp_path / "new.jsonl", records)
    before = tree_digest(run)
    refused(capsys, main(["update", str(run), "--add", str(tmp_path / "new.jsonl"), "--quiet"]), *words)
    assert tree_digest(run) == before and not (run / "maintenance").exists()
