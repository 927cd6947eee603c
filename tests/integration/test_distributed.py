"""Two processes under ``accelerate launch --multi_gpu`` on CPUs (gloo) give the single-process datastore, teacher
and memory."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from helpers import stage_worker as worker
from helpers.paths import ROOT
from mlpmem.errors import ConfigError
from mlpmem.memory import MLPMemory
from mlpmem.training.checkpoint import load_checkpoint
from mlpmem.training.config import TrainConfig
from mlpmem.training.optim import adamw
from mlpmem.utils.distributed import (
    Dist,
    merge_records,
    my_slice,
    read_records,
    write_record,
)
from mlpmem.utils.shards import save_array

WORKER = Path(worker.__file__)
WEIGHTS = "model.safetensors"


pytestmark = pytest.mark.usefixtures("subprocess_stage_env")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(backbone_dir, out, stages: str, processes: int = 2, **env) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), str(WORKER), str(backbone_dir), str(out), stages]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), OMP_NUM_THREADS="1", **env)
    # own process group, so that a timeout kills the workers too (they would otherwise wait on gloo forever)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def same_files(a: Path, b: Path, pattern: str = "*.npy") -> list[str]:
    names = sorted(p.name for p in a.glob(pattern))
    assert names and names == sorted(p.name for p in b.glob(pattern))
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    return names


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_my_slice_is_a_balanced_partition():
    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            parts = [my_slice(list(range(n)), Dist(r, world)) for r in range(world)]
            assert sum(parts, []) == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_records_merge_in_corpus_order_whatever_the_finishing_order(tmp_path):
    for index in (2, 0, 1):  # processes finish their shards in any order
        files = {"x": save_array(tmp_path, f"x-{index:05d}.npy", np.full(index + 1, index, np.int32))}
        write_record(tmp_path, {"index": index, "rows": index + 1, "files": files})
    assert sorted(read_records(tmp_path, "t")) == [0, 1, 2]
    merged = merge_records(tmp_path, {"shards": [], "rows": 0}, 3, "t")
    assert [s["index"] for s in merged["shards"]] == [0, 1, 2] and merged["rows"] == 6 and merged["complete"]
    assert not list(tmp_path.glob("part-*.json"))
    (tmp_path / "x-00001.npy").write_bytes(b"broken")  # a record whose shard no longer verifies is dropped
    write_record(tmp_path, merged["shards"][1])
    assert read_records(tmp_path, "t") == {}


def test_two_processes_equal_one_process(tiny_backbone_dir, tmp_path):
    """datastore and teacher byte-identical; the trained memory within 1e-5 (float summation order)."""
    one, two = tmp_path / "one", tmp_path / "two"
    for stage in ("datastore", "teacher", "train"):
        worker.run_stage(stage, tiny_backbone_dir, one)
    proc = launch(tiny_backbone_dir, two, "datastore,teacher,train")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(manifest(two / "ds")["shards"]) > 2  # both processes had shards to write
    assert same_files(one / "ds", two / "ds")
    assert manifest(one / "ds")["shards"] == manifest(two / "ds")["shards"]
    assert same_files(one / "teacher", two / "teacher")
    a = load_file(str(one / "memory" / "model.safetensors"))
    b = load_file(str(two / "memory" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-5, msg=name)
    state = json.loads((two / "train" / "train_state.json").read_text())
    single = json.loads((one / "train" / "train_state.json").read_text())
    assert state["processes"] == 2 and state["step"] == single["step"]


def test_two_processes_share_one_saved_faiss_index(tiny_backbone_dir, tmp_path):
    """The IVF index is built once, saved with its checksum and reopened by both processes; a process killed
    mid-build leaves shards that a single-process rerun completes to the same bytes."""
    one, two = tmp_path / "one", tmp_path / "two"
    for stage in ("datastore", "teacher-ivf"):
        worker.run_stage(stage, tiny_backbone_dir, one)
    proc = launch(tiny_backbone_dir, two, "datastore", MLPMEM_TEST_KILL_AT="4", MLPMEM_TEST_KILL_RANK="1")
    assert proc.returncode != 0  # rank 1 died after writing some of its shards; the launcher stopped rank 0
    assert not manifest(two / "ds")["complete"]
    worker.run_stage("datastore", tiny_backbone_dir, two)  # resume with another number of processes
    assert same_files(one / "ds", two / "ds")
    assert manifest(one / "ds")["shards"] == manifest(two / "ds")["shards"]
    proc = launch(tiny_backbone_dir, two, "teacher-ivf")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (two / "teacher" / "index" / "index.faiss").exists()
    meta = json.loads((two / "teacher" / "index" / "index.json").read_text())
    assert meta["kind"] == "ivf_flat" and meta["ntotal"] == manifest(one / "ds")["rows"]
    assert same_files(one / "teacher", two / "teacher")


def assert_close_files(a: Path, b: Path, tol: float = 1e-5) -> None:
    """Two safetensors files hold the same tensor names, each equal within ``tol``."""
    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys(), (a, b)
    for name in x:
        torch.testing.assert_close(x[name], y[name], rtol=tol, atol=tol, msg=f"{b}: {name}")


def train_copy(one: Path, folder: Path) -> Path:
    """A run folder holding a copy of ``one``'s datastore and teacher (training only reads them)."""
    for part in ("ds", "teacher"):
        shutil.copytree(one / part, folder / part)
    return folder


@pytest.fixture(scope="module")
def reference(tiny_backbone_dir, tmp_path_factory):
    """1-process datastore, teacher and trained memories (untied head; head tied to the frozen embedding)."""
    import mlpmem.utils.shards

    one = tmp_path_factory.mktemp("one")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:  # as subprocess_stage_env does for each test
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_FSYNC", "0")
        mp.setenv("MLPMEM_THREADS", "1")
        torch.set_num_threads(1)
        for stage in ("datastore", "teacher", "train", "train-tied"):
            worker.run_stage(stage, tiny_backbone_dir, one)
    torch.set_num_threads(threads)
    return one


def test_fsdp_two_processes_equal_one_process(reference, tiny_backbone_dir, tmp_path):
    """``sharding: fsdp`` on 2 processes trains the 1-process memory within 1e-5 (an untied head is sharded, a tied
    frozen one stays whole) and writes the usual checkpoint: full weights and moments, read by the normal loader."""
    two = train_copy(reference, tmp_path / "two")
    proc = launch(tiny_backbone_dir, two, "train-fsdp,train-tied-fsdp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for suffix in ("", "-tied"):
        assert_close_files(reference / f"memory{suffix}" / WEIGHTS, two / f"memory{suffix}" / WEIGHTS)
        for name in (f"memory/{WEIGHTS}", "optimizer.safetensors"):
            ckpt = Path(f"train{suffix}", "checkpoint", name)
            assert_close_files(reference / ckpt, two / ckpt)
        a, b = (json.loads((run / f"train{suffix}" / "train_state.json").read_text()) for run in (reference, two))
        assert b["processes"] == 2 and b["sharding"] == "fsdp" and a["step"] == b["step"]
        for x, y in zip(a["history"], b["history"], strict=True):  # the epoch evaluations ran on the sharded model
            assert y["memory_ppl"] == pytest.approx(x["memory_ppl"], rel=1e-5)
    memory = MLPMemory.from_pretrained(two / "train" / "checkpoint" / "memory")
    optimizer = adamw(memory, TrainConfig(**worker.TRAIN))
    state = load_checkpoint(two / "train" / "checkpoint", memory, optimizer)
    assert state.step == a["step"] and len(optimizer.state) == len(list(memory.parameters()))


def test_checkpoints_resume_across_sharding_and_processes(reference, tiny_backbone_dir, tmp_path, monkeypatch):
    """1 process (ddp) to step 5, then 2 processes (fsdp) to step 10, then 1 process (fsdp = plain) to the end:
    the memory of the uninterrupted 1-process run."""
    run = train_copy(reference, tmp_path / "run")
    monkeypatch.setenv("MLPMEM_TEST_STOP_AFTER", "5")
    worker.run_stage("train", tiny_backbone_dir, run)
    proc = launch(tiny_backbone_dir, run, "train-fsdp", MLPMEM_TEST_STOP_AFTER="10")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "train" / "checkpoint" / "trainer_state.json").read_text())["step"] == 10
    monkeypatch.delenv("MLPMEM_TEST_STOP_AFTER")
    worker.run_stage("train-fsdp", tiny_backbone_dir, run)
    assert_close_files(reference / "memory" / WEIGHTS, run / "memory" / WEIGHTS)


@pytest.mark.parametrize("stage", ["train-select", "train-select-fsdp"])
def test_early_stop_on_two_processes_equals_one_process(reference, tiny_backbone_dir, tmp_path, stage):
    """Evaluations every quarter epoch and early stopping: process 0 decides, both stop at its step and end
    with the best weights, those of one process."""
    one, two = train_copy(reference, tmp_path / "one"), train_copy(reference, tmp_path / "two")
    worker.run_stage("train-select", tiny_backbone_dir, one)
    proc = launch(tiny_backbone_dir, two, stage)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (json.loads((run / "train" / "train_state.json").read_text()) for run in (one, two))
    assert a["stopped_early"] and a["restored_best"] and b["processes"] == 2
    assert (a["step"], a["best_step"], b["stopped_early"]) == (b["step"], b["best_step"], True)
    assert_close_files(one / "memory" / WEIGHTS, two / "memory" / WEIGHTS)
    assert_close_files(one / "train" / "best" / WEIGHTS, two / "memory" / WEIGHTS)


def test_bad_sharding_is_a_config_error():
    with pytest.raises(ConfigError, match=r"sharding must be one of \['ddp', 'fsdp'\], got 'zero3'"):
        TrainConfig(sharding="zero3")
