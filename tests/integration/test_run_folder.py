"""A run folder never lies and never loses anything: stale stages are refused, every artifact a stage reads is
verified, one command at a time writes a folder, and mlpmem deletes only what it wrote.

The session's tiny run (``finished``) is read only; every test works on its own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.paths import SRC
from helpers.runs import copy_run, corpus_of, overridden
from mlpmem.cli import main
from mlpmem.config import read_yaml
from mlpmem.errors import CorruptArtifact, RunBusy
from mlpmem.pipeline.records import MEMORY_FILES, record_memory
from mlpmem.utils.checksums import check_finite, record_folder, verify_weights
from mlpmem.utils.distributed import remove_build
from mlpmem.utils.lock import folder_lock
from mlpmem.utils.shards import temporary

TINY = "tiny"


@pytest.fixture(scope="module")
def finished(tiny_run, tiny_backbone_dir):
    """The session's finished tiny run (read only), and the options that name its backbone and corpus."""
    corpus = corpus_of(tiny_run)
    common = ["--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus}"]
    return tiny_run, common, str(tiny_backbone_dir), str(corpus)


@pytest.fixture()
def run(finished, tmp_path):
    """A copy of the finished run, and a function running a command on it: ``cli("eval", "--set", ...)``."""
    source, common = finished[:2]
    folder = tmp_path / "run"
    copy_run(source, folder)

    def cli(command, *extra, config=TINY):
        return main([command, str(config), *overridden(common, list(extra)), "--set", f"run_dir={folder}", *extra])

    return folder, cli


def one_line_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("mlpmem: error:"), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (but the lock) with its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def flip_byte(path: Path, offset: int = -9) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# --- stale results after a config change ------------------------------------------------------------------


def test_changed_train_settings_are_refused_then_retrained_on_request(run, capsys):
    folder, cli = run
    before = files(folder)
    assert cli("run", "--set", "train.lr=0.03", "--set", "train.epochs=1") == 2
    one_line_error(capsys, "memory", "train.epochs=2", "train.epochs=1", "mlpmem train", "--rebuild",
                   f"--reuse-from {folder}")
    assert files(folder) == before  # memory, results.json and config.yaml are the old run's, and say so
    assert cli("train", "--rebuild", "--set", "train.lr=0.03", "--set", "train.epochs=1") == 0
    assert cli("run", "--set", "train.lr=0.03", "--set", "train.epochs=1") == 0
    state = json.loads((folder / "train" / "train_state.json").read_text())
    assert state["built_from"]["train.lr"] == 0.03 and state["built_from"]["train.epochs"] == 1
    assert (folder / "results.json").read_bytes() != before["results.json"]
    assert "lr: 0.03" in (folder / "config.yaml").read_text()


@pytest.mark.parametrize("setting,named", [
    ("corpus.block_size=16", "corpus.block_size=32"), ("seed=1", "seed=0"),
    ("backbone.name=smollm2-135m", "backbone.name="), ("teacher.k=4", "teacher.k=8"),
    ("memory.tie_head=true", "memory.tie_head=False")])
def test_a_changed_upstream_setting_is_named_before_any_work(run, capsys, setting, named):
    folder, cli = run
    before = files(folder)
    assert cli("run", "--set", setting) == 2
    one_line_error(capsys, named, "--rebuild")
    assert files(folder) == before


def test_eval_refuses_stale_knnlm_results_and_generate_stale_lambda(run, capsys):
    folder, cli = run
    assert cli("eval", "--set", "knnlm.k_grid=[4]") == 2
    one_line_error(capsys, "kNN-LM results", "knnlm.k_grid", "mlpmem knnlm")
    assert cli("train", "--rebuild", "--set", "train.epochs=1") == 0
    capsys.readouterr()
    assert cli("generate", "--set", "train.epochs=1", "--prompt", "The keeper") == 2
    one_line_error(capsys, "results.json", "another memory", "mlpmem eval")
    assert cli("generate", "--set", "train.epochs=1", "--prompt", "The keeper", "--lam", "0.5",
               "--max-new-tokens", "2") == 0


# --- checksums on every artifact a stage reads ---------------------------------------------------------------


def test_nan_or_flipped_bytes_in_memory_weights_are_refused_by_eval(run, capsys):
    folder, cli = run
    weights = folder / "memory" / "model.safetensors"
    results = (folder / "results.json").read_bytes()
    state = load_file(str(weights))
    name = sorted(state)[0]
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(weights), metadata={"format": "pt"})
    assert cli("eval") == 2
    one_line_error(capsys, "model.safetensors", "checksum")
    with pytest.raises(CorruptArtifact, match="NaN/Inf"):  # a memory trained into NaN is never recorded
        record_memory(folder / "memory")
    record_folder(folder / "memory", MEMORY_FILES)  # a sidecar that matches: only the values are bad
    assert cli("eval") == 2
    one_line_error(capsys, f"tensor {name} holds NaN/Inf")
    with pytest.raises(CorruptArtifact, match=f"tensor {name} holds NaN/Inf"):  # the check of every reader
        verify_weights(weights, load_file(str(weights)))
    assert (folder / "results.json").read_bytes() == results


def test_two_flipped_bytes_in_memory_weights(run, capsys):
    folder, cli = run
    weights = folder / "memory" / "model.safetensors"
    flip_byte(weights, -5), flip_byte(weights, -41)
    assert cli("generate", "--prompt", "The keeper", "--lam", "0.5") == 2
    one_line_error(capsys, "model.safetensors", "checksum", "--rebuild")


def test_check_finite_names_the_tensor():
    check_finite({"a": torch.zeros(3), "ids": torch.arange(3)}, "w")
    with pytest.raises(CorruptArtifact, match="tensor b holds NaN/Inf"):
        check_finite({"a": torch.zeros(3), "b": torch.tensor([1.0, float("inf")])}, "w")


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_neighbour_cache_is_refused_by_eval_and_searched_again_by_run(run, capsys, damage):
    folder, cli = run
    ids = folder / "knnlm" / "test" / "ids.npy"
    knn = json.loads((folder / "knnlm" / "results.json").read_text())
    flip_byte(ids) if damage == "flip" else ids.write_bytes(ids.read_bytes()[:-100])
    assert cli("eval") == 2
    one_line_error(capsys, "ids.npy", "mlpmem knnlm", "--rebuild")
    assert cli("run") == 0
    assert "searching them again" in capsys.readouterr().err
    assert json.loads((folder / "knnlm" / "results.json").read_text())["test"] == knn["test"]


def test_neighbour_cache_is_searched_again_when_the_datastore_changes(run, capsys):
    folder, cli = run
    meta = json.loads((folder / "knnlm" / "test" / "neighbours.json").read_text())
    assert set(meta["files"]) == {"dists", "ids"} and meta["inputs"]["index"] == "exact"
    meta["inputs"]["datastore"] = "0" * 64  # searched from another datastore
    (folder / "knnlm" / "test" / "neighbours.json").write_text(json.dumps(meta))
    assert cli("knnlm") == 0
    assert json.loads((folder / "knnlm" / "test" / "neighbours.json").read_text())["inputs"]["datastore"] != "0" * 64


def test_flipped_bytes_in_a_datastore_shard_are_refused_by_eval_with_the_repair(run, capsys):
    folder, cli = run
    flip_byte(folder / "datastore" / "values-00001.npy")
    results = (folder / "results.json").read_bytes()
    assert cli("eval") == 2
    one_line_error(capsys, "values-00001.npy", "checksum", "--rebuild")
    assert (folder / "results.json").read_bytes() == results


# --- config.yaml: written after validation, never over the user's file ------------------------------------------


def test_a_user_config_in_the_run_folder_is_never_rewritten(run, finished):
    folder, _ = run
    raw = read_yaml(TINY)
    raw["run_dir"] = str(folder)
    raw["backbone"]["name"], raw["corpus"]["path"] = finished[2], finished[3]
    user = folder / "config.yaml"
    user.write_text("# my own notes, kept\n" + yaml.safe_dump(raw, sort_keys=False))
    text = user.read_text()
    assert main(["eval", str(user), "--quiet"]) == 0
    assert user.read_text() == text
    other = folder.parent / "elsewhere.yaml"
    shutil.copyfile(user, other)
    assert main(["eval", str(other), "--quiet"]) == 0
    assert user.read_text() == text  # not the config given, but not mlpmem's: kept too


# --- one command at a time ---------------------------------------------------------------------------------------

HOLDER = """
import sys, time
sys.path.insert(0, {src!r})
from mlpmem.utils.lock import folder_lock
with folder_lock({folder!r}, "holder"):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_second_command_says_who_holds_the_folder_and_a_dead_holder_is_stale(run, capsys):
    folder, cli = run
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(src=str(SRC), folder=str(folder))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = files(folder)
        assert cli("run") == 3
        one_line_error(capsys, "in use by", f"pid {holder.pid}", "holder")
        with pytest.raises(RunBusy):
            with folder_lock(folder):
                pass
        assert files(folder) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with folder_lock(folder) as stale:  # the kernel dropped the dead holder's lock; its record says who it was
        assert stale["pid"] == holder.pid
        with folder_lock(folder):  # re-entrant within one process
            pass
    with folder_lock(folder) as stale:
        assert stale is None  # a clean release leaves no holder behind


def test_temporary_names_are_unique_per_process(tmp_path):
    mine = temporary(tmp_path / "keys-00001.npy")
    assert mine.name == f"keys-00001.npy.{os.getpid()}.tmp"
    theirs = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SRC)!r}); "
                             "from pathlib import Path; from mlpmem.utils.shards import temporary; "
                             f"print(temporary(Path({str(tmp_path)!r}) / 'keys-00001.npy'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert theirs != str(mine)


# --- deleting only what mlpmem wrote -------------------------------------------------------------------------------


def test_rebuild_keeps_the_users_files(run, capsys):
    folder, cli = run
    for sub in ("train", "teacher", "datastore"):
        (folder / sub / "notes.txt").write_text("mine")
    before = files(folder)
    assert cli("train", "--rebuild", config=folder / "config.yaml") == 2
    one_line_error(capsys, "refusing to rebuild", "notes.txt")
    assert files(folder) == before
    assert cli("teacher", "--rebuild") == 0
    assert (folder / "teacher" / "notes.txt").read_text() == "mine"
    assert files(folder)["teacher/manifest.json"] == before["teacher/manifest.json"]  # the same teacher again


def test_train_with_a_missing_teacher_stops_before_deleting_anything(run, capsys):
    folder, cli = run
    shutil.rmtree(folder / "teacher")
    before = files(folder)
    assert cli("train", "--rebuild") == 2
    one_line_error(capsys, "teacher", "missing", "mlpmem teacher")
    assert files(folder) == before


def test_remove_build_removes_listed_and_shard_named_files_only(tmp_path):
    out = tmp_path / "store"
    out.mkdir()
    for name in ("keys-00000.npy", "keys-00007.npy", "part-00001.json", "x.npy.123.tmp", "notes.txt", "keys.npy"):
        (out / name).write_text("x")
    (out / "manifest.json").write_text(json.dumps({"shards": [{"files": {"k": {"name": "keys-00000.npy"}}}]}))
    (out / "index").mkdir()
    (out / "index" / "index.faiss").write_text("x")
    remove_build(out)
    assert sorted(p.name for p in out.iterdir()) == ["keys.npy", "notes.txt"]
    for p in out.iterdir():
        p.unlink()
    remove_build(out)
    assert not out.exists()  # nothing of the user's was left: the folder goes too


@pytest.mark.parametrize("where", ["root", "home", "file", "foreign"])
def test_run_dir_must_be_a_folder_of_its_own(where, tmp_path, finished, capsys):
    common = finished[1]
    target = {"root": Path("/"), "home": Path.home(), "file": tmp_path / "a-file", "foreign": tmp_path / "mine"}[where]
    if where == "file":
        target.write_text("not a folder")
    if where == "foreign":
        target.mkdir()
        (target / "thesis.tex").write_text("mine")
    before = sorted(p.name for p in target.iterdir()) if target.is_dir() and where == "foreign" else None
    assert main(["datastore", TINY, *common, "--set", f"run_dir={target}"]) == 2
    one_line_error(capsys, "run_dir", {"root": "root folder", "home": "home folder", "file": "existing file",
                                       "foreign": "thesis.tex"}[where])
    if before is not None:
        assert sorted(p.name for p in target.iterdir()) == before
    if where == "file":
        assert target.read_text() == "not a folder"


def test_a_locked_folder_is_mlpmems_own_whatever_was_added(run, capsys):
    folder, cli = run
    (folder / "my-notes.md").write_text("mine")
    assert cli("report") == 0
    assert (folder / "my-notes.md").read_text() == "mine"


def test_a_run_without_stage_records_is_checked_by_its_artifacts_then_recorded(run):
    """Stages killed before they were recorded: each artifact is checked by its own record (manifests, the trainer
    state), then the stages are recorded."""
    folder, cli = run
    shutil.rmtree(folder / "stages")
    (folder / "memory.sha256.json").unlink()
    assert cli("run") == 0
    assert sorted(p.name for p in (folder / "stages").iterdir()) == [
        "datastore.json", "eval.json", "knnlm.json", "teacher.json", "train.json"]
    assert (folder / "memory.sha256.json").is_file()
