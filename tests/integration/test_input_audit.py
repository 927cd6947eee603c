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


@pytest.mark.parametrize("lam", ["2", "-0.1", "nan"])
def test_generate_refuses_a_lambda_before_the_run_loads(tmp_path, capsys, monkeypatch, lam):
    import mlpmem.cli.stages as stages

    monkeypatch.setattr(stages, "_run", lambda args: pytest.fail("the run loaded before --lam was checked"))
    code = main(["generate", str(tmp_path / "config.yaml"), "--prompt", "The keeper", "--lam", lam])
    refused(capsys, code, "--lam", "[0, 1]")


@pytest.mark.parametrize("name", ["compare.md", "compare.json", "delta.png"])
def test_compare_out_never_writes_over_a_users_file(tmp_path, capsys, name):
    for stem in ("base", "a"):
        (tmp_path / f"{stem}.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("my notes\n")
    code = main(["compare", "--base", str(tmp_path / "base.json"), "--method", str(tmp_path / "a.json"),
                 "--out", str(out)])
    refused(capsys, code, "--out", name, "refusing to replace it")
    assert (out / name).read_text() == "my notes\n" and sorted(p.name for p in out.iterdir()) == [name]


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


# --- files written where the user says: never over a file mlpmem did not write ------------------------------------


@pytest.fixture()
def mine(tmp_path) -> Path:
    """A user's folder: a file of theirs and an empty folder."""
    (tmp_path / "mine" / "folder").mkdir(parents=True)
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    return tmp_path / "mine"


@pytest.mark.parametrize("option", ["--html", "--json"])
@pytest.mark.parametrize("target, words", [
    ("notes.txt", ["refusing to replace it", "not an earlier output of"]),
    ("folder", ["is a folder"]),
    ("notes.txt/page", ["notes.txt is a file, not a folder"]),
])
def test_explain_never_writes_over_a_users_file(run, mine, capsys, monkeypatch, option, target, words):
    import mlpmem.cli.maintenance

    monkeypatch.setattr(mlpmem.cli.maintenance, "explain_run", lambda *a: pytest.fail("explained before checking"))
    before = tree_digest(mine)
    refused(capsys, main(["explain", str(run), "--prompt", "The", option, str(mine / target), "--quiet"]),
            option, *words)
    assert tree_digest(mine) == before


def test_explain_replaces_its_own_page_but_not_a_runs_report(run, mine, capsys):
    before = tree_digest(run)
    refused(capsys, main(["explain", str(run), "--prompt", "The", "--html", str(run / "report.md"), "--quiet"]),
            "not an earlier output of --html")
    refused(capsys, main(["explain", str(run), "--prompt", "The", "--html", str(mine / "e"), "--json",
                          str(mine / "e"), "--quiet"]), "both name")
    assert tree_digest(run) == before
    for _ in range(2):  # the second time over its own files
        assert main(["explain", str(run), "--prompt", "The", "--html", str(mine / "e.html"), "--json",
                     str(mine / "e.json"), "--quiet"]) == 0
    assert (mine / "notes.txt").read_text() == "mine" and '"prompt": "The"' in (mine / "e.json").read_text()


@pytest.mark.parametrize("extra, words", [
    (["--out", "MINE/notes.txt"], ["--out", "not an earlier output of --out"]),
    (["--out", "MINE/folder"], ["--out", "is a folder"]),
    (["--copy-reports", "MINE/notes.txt"], ["--copy-reports", "notes.txt is a file, not a folder"]),
    (["--copy-reports", "MINE"], ["--copy-reports", "run/report.md", "not an earlier output"]),
    (["RUN"], ["are one run"]),
    (["OTHER", "--copy-reports", "MINE"], ["share the folder name 'run'"]),
])
def test_summarize_never_writes_over_a_users_file(run, mine, tmp_path, capsys, extra, words):
    other = tmp_path / "other" / "run"
    other.mkdir(parents=True)
    (mine / "run").mkdir()
    (mine / "run" / "report.md").write_text("# my own report")
    before = tree_digest(mine)
    paths = {"RUN": str(run), "OTHER": str(other)}
    refused(capsys, main(["summarize", str(run), *[paths.get(a, a.replace("MINE", str(mine))) for a in extra]]),
            *words)
    assert tree_digest(mine) == before


def test_summarize_labels_two_runs_of_one_folder_name_by_their_paths(run, tmp_path, capsys):
    other = tmp_path / "other" / run.name
    copy_run(run, other, link_shards=True)
    assert main(["summarize", str(run), str(other)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == [f"| {run}", f"| {other}"]


@pytest.mark.parametrize("name", ["lambda.png", "results.json", "report.md"])
def test_copy_reports_replaces_only_its_own_unchanged_copies(run, tmp_path, capsys, name):
    dest = tmp_path / "docs"
    assert main(["summarize", str(run), "--copy-reports", str(dest)]) == 0
    assert main(["summarize", str(run), "--copy-reports", str(dest)]) == 0  # its own copies: replaced
    (dest / run.name / name).write_bytes((dest / run.name / name).read_bytes() + b"\n")  # the user's edit
    before = tree_digest(dest)
    capsys.readouterr()
    refused(capsys, main(["summarize", str(run), "--copy-reports", str(dest)]), name, "changed since")
    assert tree_digest(dest) == before


def test_summarize_replaces_its_own_table_and_copies(run, tmp_path):
    for _ in range(2):  # the second time over its own files
        assert main(["summarize", str(run), "--out", str(tmp_path / "t.md"), "--copy-reports",
                     str(tmp_path / "docs")]) == 0
    assert (tmp_path / "docs" / "run" / "report.md").read_bytes() == (run / "report.md").read_bytes()


# --- lm-eval --model-args: each KEY=VALUE taken exactly, checked before any model loads ----------------------------


@pytest.mark.parametrize("model_args, extra, words", [
    ("run=RUN,lamb=0.5", [], ["takes no lamb=", "lam"]),
    ("run=RUN, lam=0.5", [], ["' lam' has a space at an end"]),
    ("run=RUN,lam=0.2,lam=0.5", [], ["lam= twice"]),
    ("run=RUN,,lam=0.5", [], ["empty item"]),
    ("run=RUN,lam", [], ["'lam' is not KEY=VALUE"]),
    ("run=RUN,lam=1.5", [], ["lam must be in [0, 1], got 1.5"]),
    ("run=RUN,lam=-0.1", [], ["lam must be in [0, 1]"]),
    ("run=RUN,lam=0.5", ["--methods", "backbone"], ["lam= applies to none of --methods backbone"]),
    ("pretrained=RUN,max_lenght=9", ["--model", "hf"], ["hf model type takes no max_lenght="]),
])
def test_lm_eval_model_args_are_taken_exactly(run, capsys, monkeypatch, model_args, extra, words):
    import mlpmem.evaluation.harness as harness
    import mlpmem.evaluation.one_pass as one_pass

    monkeypatch.setattr(harness, "evaluate", lambda *a, **k: pytest.fail("scored before its arguments were checked"))
    monkeypatch.setattr(one_pass.OnePass, "models", lambda *a: pytest.fail("loaded before its arguments were checked"))
    code = main(["lm-eval", "--tasks", "tiny_ll", "--model-args", model_args.replace("RUN", str(run)), *extra])
    refused(capsys, code, *words)


# --- the Python API: augmented_from_run and save_pretrained take their arguments or refuse them -------------------


@pytest.mark.parametrize("kwargs, words", [
    ({"gate": "false"}, ["gate must be True or False"]),
    ({"gate_offset": 1.0}, ["gate_offset needs gate=True"]),
    ({"gate_floor": 0.2}, ["gate_floor needs gate=True"]),
    ({"lam": 0.3, "gate": True}, ["exclude each other"]),
    ({"lam": 1.5}, ["lam must be in [0, 1]"]),
    ({"lam": "0.3"}, ["'auto' or a number"]),
])
def test_augmented_from_run_refuses_what_it_would_ignore(run, kwargs, words):
    from mlpmem.pipeline.hf_export import augmented_from_run

    with pytest.raises(ConfigError) as exc:
        augmented_from_run(run, **kwargs)
    assert "\n" not in str(exc.value) and all(word in str(exc.value) for word in words), str(exc.value)


def test_save_pretrained_refuses_what_it_would_ignore(run, tmp_path):
    from mlpmem.pipeline.hf_export import augmented_from_run

    model = augmented_from_run(run)
    for kwargs, words in (({"push_to_hub": True}, "push_to_hub=True) is not supported"),
                          ({"max_shard_size": "1GB"}, "max_shard_size='1GB'"), ({"safe": True}, "takes no safe=")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            model.save_pretrained(tmp_path / "saved", **kwargs)
        assert not (tmp_path / "saved").exists()
    assert model.save_pretrained(tmp_path / "saved", push_to_hub=False, is_main_process=True).is_dir()
