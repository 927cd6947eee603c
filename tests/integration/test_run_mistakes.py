"""The bad-input matrix on a finished run (issue 50's probe): what a user does to a run, or what the machine does to
it, ends in a correct result or in one line with exit 2 (3: busy), and a refused command leaves every file as it was.

Duplicate YAML keys are refused in ``tests/test_config.py``; a kill at every rename of a maintenance commit followed
by each command is ``tests/maintenance/test_kills.py``.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from safetensors import SafetensorError

import mlpmem.memory.io
import mlpmem.utils.commit
import mlpmem.utils.lock
import mlpmem.utils.shards
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import new_docs, state, tiny_run, tree_digest
from helpers.runs import copy_run
from mlpmem.cli import main
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.update import update_run
from mlpmem.pipeline.hf_export import augmented_from_run
from mlpmem.utils.shards import DiskFull

QUICK = load_maintenance_config(overrides=["update.epochs=1"])
FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


@pytest.fixture()
def folder(tiny_run, tmp_path) -> Path:
    return copy_run(tiny_run, tmp_path / "run")


def refused(capsys, code: int, expected: int = 2, *words: str) -> str:
    """The command exited ``expected`` with one line on stderr (notes aside) holding ``words``."""
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not line.startswith("note:")]
    assert code == expected and len(lines) == 1 and lines[0].startswith("mlpmem: error:"), (code, err)
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def one_line(excinfo, *words: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


# --- writers never delete what they did not write -------------------------------------------------------------


def test_an_export_never_replaces_a_run_folder_nor_a_users_folder(folder, tmp_path):
    model, before = augmented_from_run(folder), tree_digest(folder)
    with pytest.raises(ConfigError) as exc:
        model.save_pretrained(folder)
    one_line(exc, "refusing to replace", "a run folder", "config.yaml")
    assert tree_digest(folder) == before
    user = tmp_path / "mine"
    (user / "memory").mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as exc:
        model.save_pretrained(user)
    one_line(exc, "refusing to replace", "notes.txt")
    assert (user / "notes.txt").read_text() == "mine"
    export = model.save_pretrained(tmp_path / "export")
    model.save_pretrained(export)  # an earlier save of its own is replaced
    (export / "memory" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as exc:
        model.save_pretrained(export)
    one_line(exc, "memory/notes.txt")
    assert (export / "memory" / "notes.txt").read_text() == "mine"


# --- verification cannot be switched off by deleting a file ----------------------------------------------------


def test_a_run_memory_without_its_checksum_record_is_refused_until_recorded_deliberately(folder, capsys):
    (folder / "memory.sha256.json").unlink()
    before, config = tree_digest(folder), str(folder / "config.yaml")
    for command in (["generate", config, "--prompt", "The keeper", "--lam", "0.5", "--quiet"],
                    ["run", config, "--quiet"], ["explain", str(folder), "--prompt", "The keeper", "--quiet"]):
        refused(capsys, main(command), 2, "no checksum record", f"mlpmem record-checksums {folder}")
    assert tree_digest(folder) == before
    assert main(["record-checksums", str(folder)]) == 0
    assert main(["generate", config, "--prompt", "The keeper", "--max-new-tokens", "2", "--quiet"]) == 0
    assert main(["record-checksums", str(folder)]) == 0 and "nothing to do" in capsys.readouterr().out


def test_weights_copied_over_a_recorded_memory_are_refused_and_never_recorded(folder, capsys):
    weights = folder / "memory" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\x00" * 8)
    refused(capsys, main(["record-checksums", str(folder)]), 2, "fails its checksum")
    refused(capsys, main(["eval", str(folder / "config.yaml"), "--quiet"]), 2, "fails its checksum")


def test_an_export_without_its_checksum_record_is_refused_until_recorded(folder, tmp_path, capsys):
    export = augmented_from_run(folder).save_pretrained(tmp_path / "export")
    (export / "memory.sha256.json").unlink()
    with pytest.raises(CorruptArtifact) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(export)
    one_line(exc, "no checksum record", f"mlpmem record-checksums {export}")
    assert main(["record-checksums", str(export)]) == 0
    assert MemoryAugmentedForCausalLM.from_pretrained(export).lam == augmented_from_run(folder).lam


def test_summarize_never_shows_numbers_of_artifacts_an_update_replaced(folder, tmp_path, capsys):
    update_run(tiny_run(folder), new_docs(tmp_path / "new.jsonl"), QUICK)
    before = tree_digest(folder)
    refused(capsys, main(["summarize", str(folder)]), 2, "kNN-LM results", "mlpmem run")
    refused(capsys, main(["report", str(folder / "config.yaml"), "--quiet"]), 2, "results.json", "mlpmem eval")
    assert tree_digest(folder) == before
    assert main(["run", str(folder / "config.yaml"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summarize", str(folder)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    results = json.loads((folder / "results.json").read_text())
    assert f"{results['test']['memory']:.3f}" in row and f"{results['datastore_tokens']:,}" in row


# --- a config knows where it lives ----------------------------------------------------------------------------


def test_a_copied_run_folders_config_is_refused_naming_both_folders(folder, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)  # as `cp -a`: its config.yaml still names the original
    original, copied = tree_digest(folder), tree_digest(copy)
    for command in ("eval", "generate", "report", "run"):
        extra = ["--prompt", "The keeper"] if command == "generate" else []
        refused(capsys, main([command, str(copy / "config.yaml"), "--quiet", *extra]), 2, str(copy), str(folder))
    assert tree_digest(folder) == original and tree_digest(copy) == copied
    assert main(["generate", str(copy / "config.yaml"), "--set", f"run_dir={copy}", "--prompt", "The keeper",
                 "--max-new-tokens", "2", "--quiet"]) == 0
    assert tree_digest(folder) == original


# --- maintenance that is refused leaves nothing; a killed forget reruns to its end -----------------------------


def test_forgetting_every_document_is_refused_and_leaves_nothing_staged(folder, tmp_path, capsys):
    ids = [json.loads(line)["id"] for line in (folder / "corpus" / "train.jsonl").read_text().splitlines()]
    before = tree_digest(folder)
    refused(capsys, main(["forget", str(folder), "--docs", ",".join(ids), "--quiet"]), 2, "would leave 0 positions")
    assert tree_digest(folder) == before and not (folder / "maintenance").exists()
    refused(capsys, main(["forget", str(folder), "--docs", f"{ids[0]},,{ids[1]}", "--quiet"]), 2, "empty name")
    assert main(["update", str(folder), "--add", str(new_docs(tmp_path / "new.jsonl")), "--set", "update.epochs=1",
                 "--quiet"]) == 0


def test_a_forget_killed_after_its_commit_record_reruns_to_exit_0(folder, tmp_path, capsys, monkeypatch):
    uninterrupted = copy_run(folder, tmp_path / "uninterrupted")
    assert main(["forget", str(uninterrupted), "--docs", "doc3", "--set", "forget.epochs=1", "--quiet"]) == 0

    def killed(src, dst):
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(mlpmem.utils.commit, "_move", killed)
        assert main(["forget", str(folder), "--docs", "doc3", "--set", "forget.epochs=1", "--quiet"]) == 130
    capsys.readouterr()
    assert main(["forget", str(folder), "--docs", "doc3", "--set", "forget.epochs=1", "--quiet"]) == 0
    assert "nothing to forget: 1 document(s) already forgotten" in capsys.readouterr().out
    assert state(folder) == state(uninterrupted)


# --- the machine's limits: a folder that cannot be written, a full disk ---------------------------------------


def test_a_run_folder_that_cannot_be_written_is_one_line(folder, tmp_path, capsys, monkeypatch):
    config, docs = str(folder / "config.yaml"), str(new_docs(tmp_path / "new.jsonl"))
    (folder / ".lock").unlink(missing_ok=True)
    before = tree_digest(folder)
    real_open = mlpmem.utils.lock.os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(mlpmem.utils.lock.os, "open", read_only)
        for command in (["eval", config], ["run", config], ["report", config], ["update", str(folder), "--add", docs],
                        ["forget", str(folder), "--docs", "doc3"], ["explain", str(folder), "--prompt", "The"]):
            refused(capsys, main([*command, "--quiet"]), 2, "cannot be written", "Read-only file system")
    assert tree_digest(folder) == before


def test_any_write_refused_by_the_file_system_is_one_line(folder, capsys, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "results.json")

    monkeypatch.setattr(mlpmem.utils.shards, "atomic_write_bytes", denied)
    monkeypatch.setattr("mlpmem.pipeline.run.atomic_write_bytes", denied)
    monkeypatch.setattr("mlpmem.pipeline.records.write_json", denied)
    refused(capsys, main(["eval", str(folder / "config.yaml"), "--quiet"]), 2, "cannot write", "Permission denied")


def test_a_full_disk_in_a_safetensors_save_is_one_line_and_the_update_resumes(folder, tmp_path, capsys, monkeypatch):
    docs, before = new_docs(tmp_path / "new.jsonl"), state(folder)
    update = ["update", str(folder), "--add", str(docs), "--set", "update.epochs=1", "--quiet"]

    def full(*args, **kwargs):
        raise SafetensorError(FULL)

    with monkeypatch.context() as mp:
        mp.setattr(mlpmem.memory.io, "save_file", full)
        refused(capsys, main(update), 2, "disk full while writing", "No space left on device")
    assert state(folder) == before and (folder / "maintenance" / "pending" / "plan.json").is_file()
    assert not list(folder.rglob("*.tmp*"))
    assert main(update) == 0 and state(folder)["memory"] != before["memory"]


def test_a_full_disk_in_a_checkpoint_is_disk_full(tmp_path, monkeypatch, tiny_llama, tiny_tokenizer):
    import torch

    import mlpmem.training.checkpoint as checkpoint
    from helpers.tiny import memory_config_for
    from mlpmem.memory import MLPMemory

    def full(*args, **kwargs):
        raise SafetensorError(FULL)

    monkeypatch.setattr(checkpoint, "save_file", full)
    memory = MLPMemory(memory_config_for(tiny_llama, tokenizer=tiny_tokenizer))
    with pytest.raises(DiskFull) as exc:
        checkpoint.save_checkpoint(tmp_path / "checkpoint", memory, {"0.m": torch.zeros(1)}, {"step": 1})
    one_line(exc, "disk full while writing", "checkpoint")
    assert not list(tmp_path.iterdir())


# --- the backbone's positions ---------------------------------------------------------------------------------


def test_a_prompt_past_the_backbones_positions_is_one_line(folder, capsys):
    long = "The keeper counted the gulls. " * 120  # more than the tiny backbone's 512 positions
    refused(capsys, main(["generate", str(folder / "config.yaml"), "--prompt", long, "--lam", "0.5", "--quiet"]), 2,
            "more than the backbone's 512", "max_position_embeddings")
    refused(capsys, main(["explain", str(folder), "--prompt", long, "--quiet"]), 2, "more than the backbone's 512")
    near = "The keeper counted the gulls. " * 70
    refused(capsys, main(["generate", str(folder / "config.yaml"), "--prompt", near, "--lam", "0.5",
                          "--max-new-tokens", "200", "--quiet"]), 2, "generate fewer tokens")


def test_a_gpt2_generation_past_its_positions_is_refused_not_an_index_error(tiny_gpt2, tiny_tokenizer):
    import torch

    from helpers.tiny import memory_config_for
    from mlpmem.memory import MLPMemory

    memory = MLPMemory(memory_config_for(tiny_gpt2, tokenizer=tiny_tokenizer)).eval()
    model = MemoryAugmentedForCausalLM.from_parts(tiny_gpt2, memory, lam=0.5, tokenizer=tiny_tokenizer)
    ids = torch.ones(1, 500, dtype=torch.long)
    with pytest.raises(ConfigError) as exc:
        model.generate(input_ids=ids, max_new_tokens=20, do_sample=False, pad_token_id=0)
    one_line(exc, "520 positions", "the backbone's 512")
    assert model.generate(input_ids=ids, max_new_tokens=12, do_sample=False, pad_token_id=0).shape == (1, 512)


# --- lm-eval's arguments, checked before any model loads ------------------------------------------------------


@pytest.mark.parametrize("extra, words", [
    (["--tasks", ""], ["--tasks is empty"]),
    (["--tasks", "tiny_ll,,tiny_roll"], ["empty name"]),
    (["--tasks", "tiny_ll", "--methods", "backbone,"], ["--methods", "empty name"]),
    (["--tasks", "tiny_ll", "--limit", "-1"], ["--limit", "got -1"]),
    (["--tasks", "tiny_ll", "--limit", "0"], ["--limit", "got 0"]),
    (["--tasks", "tiny_ll", "--limit", "2.5"], ["--limit", "got 2.5"]),
    (["--tasks", "tiny_ll", "--output", "FOLDER"], ["is a folder"]),
    (["--tasks", "tiny_ll", "--methods", "backbone,memory", "--output", "FILE"], ["is a file"]),
])
def test_bad_lm_eval_arguments_are_refused_before_any_scoring(folder, tmp_path, capsys, monkeypatch, extra, words):
    import mlpmem.evaluation.harness as harness

    (tmp_path / "out-folder").mkdir()
    (tmp_path / "out-file.json").write_text("{}")
    monkeypatch.setattr(harness, "evaluate", lambda *a, **k: pytest.fail("scored before its arguments were checked"))
    paths = {"FOLDER": str(tmp_path / "out-folder"), "FILE": str(tmp_path / "out-file.json")}
    before = tree_digest(tmp_path)
    code = main(["lm-eval", "--model-args", f"run={folder}", *[paths.get(a, a) for a in extra]])
    refused(capsys, code, 2, *words)
    assert tree_digest(tmp_path) == before
