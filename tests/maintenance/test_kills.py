"""An ``update`` or a ``forget`` killed at every rename of its commit, then any command: the run ends as after the
uninterrupted operation, and the command answers as it does there.

Each operation is staged once and killed right after it wrote ``commit.json``; each kill point ``k`` is that
folder's commit performed again up to its ``k``-th rename (the disk as a kill there leaves it). Each command
covers every len(COMMANDS)-th kill point (all of them together cover every rename), plus a kill in the middle of
the memory's swap (the old folder moved aside, the new one not yet in).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import mlpmem.utils.commit as commit_module
import mlpmem.utils.shards
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import write_tasks
from helpers.maintenance import committed_state, new_docs, tiny_run
from helpers.runs import copy_run
from mlpmem.cli import main
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.update import update_run

QUICK = load_maintenance_config(overrides=["update.epochs=1", "forget.epochs=1"])
FORGET = ["doc3"]
COMMANDS = ("run", "eval", "generate", "explain", "summarize", "lm-eval", "report", "again")


class Killed(KeyboardInterrupt):
    """The kill, raised where the process would die."""


def operate(op: str, folder: Path, docs: Path) -> None:
    run = tiny_run(folder)
    update_run(run, docs, QUICK) if op == "update" else forget_run(run, FORGET, QUICK)


def command(name: str, op: str, folder: Path, docs: Path, tasks: Path) -> int:
    config = str(folder / "config.yaml")
    return main({
        "run": ["run", config, "--quiet"],
        "eval": ["eval", config, "--quiet"],
        "generate": ["generate", config, "--prompt", "The keeper", "--lam", "0.5", "--max-new-tokens", "2", "--quiet"],
        "explain": ["explain", str(folder), "--prompt", "The keeper", "--quiet"],
        "summarize": ["summarize", str(folder)],
        "lm-eval": ["lm-eval", "--tasks", "tiny_ll", "--include-path", str(tasks), "--local-only", "--limit", "2",
                    "--model-args", f"run={folder},lam=0.5"],
        "report": ["report", config, "--quiet"],
        "again": (["update", str(folder), "--add", str(docs), "--set", "update.epochs=1", "--quiet"] if op == "update"
                  else ["forget", str(folder), "--docs", ",".join(FORGET), "--set", "forget.epochs=1", "--quiet"]),
    }[name])


def killing_move(monkeypatch, at: int | str) -> list[int]:
    """Kill at the ``at``-th rename of the commit (before it), or with ``"swap"`` inside the memory's swap."""
    real, calls = commit_module._move, [0]

    def dying(src: Path, dst: Path) -> None:
        calls[0] += 1
        if at == "swap" and src.is_dir() and dst.exists():
            dst.rename(dst.with_name(f".{dst.name}{commit_module.OLD}"))
            raise Killed
        if calls[0] == at:
            raise Killed
        real(src, dst)

    monkeypatch.setattr(commit_module, "_move", dying)
    return calls


@pytest.fixture(scope="module")
def reference(tiny_run, tmp_path_factory):
    """For each operation: the run after it, uninterrupted, and the number of renames of its commit; the run
    killed right after its ``commit.json``; the answer of each command after the uninterrupted operation
    (computed once, on a copy)."""
    root = tmp_path_factory.mktemp("kills")
    docs, tasks = new_docs(root / "new.jsonl"), root / "tasks"
    tasks.mkdir()
    write_tasks(tasks)
    out = {"docs": docs, "tasks": tasks}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")  # as every test here (helpers.fast): the same rounding
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        for op in ("update", "forget"):
            folder, staged = copy_run(tiny_run, root / op), copy_run(tiny_run, root / f"{op}-staged")
            calls = killing_move(mp, at=-1)
            operate(op, folder, docs)
            killing_move(mp, at=1)
            with pytest.raises(Killed):
                operate(op, staged, docs)
            out[op] = {"folder": folder, "renames": calls[0], "state": committed_state(folder), "answers": {},
                       "staged": staged}
        torch.set_num_threads(threads)
    return out


def answer(reference: dict, op: str, name: str, tmp_path: Path) -> int:
    """The exit status of command ``name`` on a copy of the run after the uninterrupted ``op``."""
    answers = reference[op]["answers"]
    if name not in answers:
        folder = copy_run(reference[op]["folder"], tmp_path / f"reference-{name}")
        answers[name] = command(name, op, folder, reference["docs"], reference["tasks"])
        shutil.rmtree(folder)
    return answers[name]


@pytest.mark.parametrize("op", ["update", "forget"])
@pytest.mark.parametrize("name", COMMANDS)
def test_a_kill_at_any_rename_then_any_command_ends_as_the_uninterrupted_operation(reference, tmp_path, monkeypatch,
                                                                                  op, name):
    ref, index = reference[op], COMMANDS.index(name)
    assert ref["renames"] > len(COMMANDS), ref["renames"]  # every command sees at least one kill point
    points: list[int | str] = list(range(1 + index, ref["renames"] + 1, len(COMMANDS)))
    points += ["swap"] if name in ("run", "generate") else []
    expected = answer(reference, op, name, tmp_path)
    for at in points:
        folder = copy_run(ref["staged"], tmp_path / f"killed-{at}", link_shards=True)
        with monkeypatch.context() as mp:
            killing_move(mp, at)
            with pytest.raises(Killed):
                commit_module.apply(folder)
        assert (folder / "maintenance" / "pending" / "commit.json").is_file()
        assert command(name, op, folder, reference["docs"], reference["tasks"]) == expected, (at, name)
        assert committed_state(folder) == ref["state"], (at, name)
        shutil.rmtree(folder)
