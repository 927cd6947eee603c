"""The five measurements of ``python -m studies bench scale``, each driving fresh worker processes;
one list of rows each."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from studies.bench.scale.corpus import repeated_corpus
from studies.bench.scale.launch import WORKER_MODULE, launch, run_worker
from studies.bench.synthetic_keys import synthetic_keystore


def bench_processes(config: str, out: Path, tokens: int, worlds: list[int]) -> list[dict]:
    """Datastore and teacher stages of a real run on ``tokens`` training tokens with each process count."""
    rows = []
    for world in worlds:
        run_dir = out / f"procs-{world}"
        for stage in ("datastore", "teacher"):
            wall, ranks = launch(world, ["worker-stage", config, str(run_dir), str(tokens), stage])
            seconds = max(r["seconds"] for r in ranks)
            rows.append({"stage": stage, "processes": world, "rows": ranks[0]["rows"], "launch_wall_s": wall,
                         "stage_s": seconds, "tokens_per_s": ranks[0]["rows"] / seconds})
    return rows


def bench_memory(out: Path, sizes: list[int], dim: int, vocab: int, steps: int) -> list[dict]:
    """Peak RSS of the teacher and of training (rows on demand, or in RAM) over synthetic stores of each size."""
    rows = []
    for size in sizes:
        store = synthetic_keystore(out / f"synthetic-{size}" / "datastore", size, dim, vocab)
        gib = sum(p.stat().st_size for p in store.glob("*.npy")) / 2**20
        for what in ("teacher", "train", "train-in-ram"):
            r = run_worker(["worker-memory", str(store), what, str(steps)])
            rows.append({"rows": size, "datastore_mb": gib, "stage": what, **r})
    return rows


def bench_sharding(out: Path, size: int, dim: int, vocab: int, steps: int, width: int) -> list[dict]:
    """DDP against FSDP training with 2 processes: each process's peak RSS and seconds."""
    store = synthetic_keystore(out / f"synthetic-{size}" / "datastore", size, dim, vocab)  # reused when built
    if not (store.parent / "teacher" / "manifest.json").is_file():
        run_worker(["worker-memory", str(store), "teacher", "0"])
    rows = []
    # FSDP on CPU turns on glibc's mmap threshold itself (train.return_large_frees_to_os); DDP is measured with
    # the default allocator and with the same setting, so that the comparison is like for like.
    for sharding, mmap_frees in (("ddp", False), ("ddp", True), ("fsdp", True)):
        shutil.rmtree(store.parent / f"shard-{sharding}-0", ignore_errors=True)
        env = {"MALLOC_MMAP_THRESHOLD_": "1048576"} if mmap_frees and sharding == "ddp" else None
        _, ranks = launch(2, ["worker-sharding", str(store), sharding, str(steps), str(width)], env)
        rows += [{"sharding": sharding, "mmap_frees": mmap_frees, "steps": steps, "width": width, **r}
                 for r in sorted(ranks, key=lambda r: r["rank"])]
    return rows


def bench_corpus(config: str, out: Path, repeats: list[int]) -> list[dict]:
    """Peak RSS of the datastore stage (and of tokenizing in RAM) over the training split repeated each time."""
    rows = []
    for r in repeats:
        run_dir = repeated_corpus(config, out / f"corpus-x{r}", r)
        corpus_mb = (run_dir.parent / "corpus" / "train.jsonl").stat().st_size / 2**20
        for mode in ("stream", "in-ram"):
            rows.append({"repeats": r, "corpus_mb": corpus_mb, "mode": mode,
                         **run_worker(["worker-corpus", str(run_dir), mode])})
    return rows


def bench_resume(out: Path, size: int) -> dict:
    """Teacher from scratch, then SIGKILLed at half of its shards and rerun."""
    store = out / f"synthetic-{size}" / "datastore"
    teacher = store.parent / "teacher"
    scratch = run_worker(["worker-memory", str(store), "teacher", "0"])["seconds"]
    shards = len(json.loads((store / "manifest.json").read_text())["shards"])
    shutil.rmtree(teacher)  # the finished scratch build must not be mistaken for the killed run's progress
    cmd = [sys.executable, "-m", WORKER_MODULE, "worker-memory", str(store), "teacher", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        manifest = teacher / "manifest.json"
        done = len(json.loads(manifest.read_text())["shards"]) if manifest.exists() else 0
        if done >= max(1, shards // 2):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    done = len(json.loads((teacher / "manifest.json").read_text())["shards"])
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from studies.bench.scale.synthetic import resume_teacher as r; "
                    f"r({str(store)!r})"], check=True, capture_output=True)
    resumed = time.perf_counter() - t0
    return {"rows": size, "shards": shards, "shards_done_at_kill": done, "scratch_s": scratch,
            "resume_s": resumed, "resume_over_scratch": resumed / scratch}
