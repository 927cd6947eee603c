"""``mlpmem bench-scale``: throughput with 1 and N processes, peak memory against datastore size, resume cost.

Three measurements, each in fresh subprocesses so that peak RSS and timings belong to one stage:

1. **Processes.** Key extraction (the datastore stage) and the teacher on the first ``--tokens`` training
   tokens of a config's corpus, launched with ``accelerate launch --multi_gpu --num_processes W`` for each W
   (on a machine without GPUs accelerate runs W CPU processes over gloo). Reported: wall time of the launch
   (process start included) and tokens/s of the stage itself (slowest process).
2. **Memory.** Synthetic keystores (random fp16 keys, ``--dim`` wide) of two sizes; for each, the peak RSS of
   the teacher (IVF-PQ filled shard by shard) and of ``--train-steps`` training steps reading rows from the
   memory-mapped shards, next to the peak RSS of training from keys held in RAM (the old way).
3. **Resume.** The teacher over the larger synthetic store: from scratch, then killed with SIGKILL once half of
   its shards are recorded and rerun: the rerun's time against the from-scratch time.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------------
# Workers (run in subprocesses)


def _load_run(config: str, run_dir: str, tokens: int):
    from mlpmem.config import PipelineConfig
    from mlpmem.pipeline import Run

    cfg = PipelineConfig.from_yaml(config, [f"run_dir={run_dir}", f"corpus.max_tokens={{train: {tokens}}}"])
    return Run(cfg, progress=False)


def worker_stage(config: str, run_dir: str, tokens: int, stage: str) -> dict:
    """One stage of a real run under the launcher; returns this process's seconds and rows."""
    from mlpmem.datastore import build_keystore
    from mlpmem.distributed import current
    from mlpmem.index import set_threads
    from mlpmem.pipeline import split_tokens, teacher_config
    from mlpmem.teacher import build_teacher

    dist = current()
    set_threads()
    run = _load_run(config, run_dir, tokens)
    cfg = run.cfg
    if stage == "datastore":
        docs = split_tokens(run, "train")
        model, tokenizer = run.backbone
        dist.barrier()
        t0 = time.perf_counter()
        manifest = build_keystore(model, tokenizer, docs, run.path("datastore"), layer=cfg.backbone.layer,
                                  site=cfg.backbone.site, block_size=cfg.corpus.block_size, stride=cfg.corpus.stride,
                                  batch_size=cfg.datastore.batch_size, batches_per_shard=1,
                                  precision=cfg.backbone.precision, progress=False, dist=dist)
    else:
        dist.barrier()
        t0 = time.perf_counter()
        manifest = build_teacher(run.path("datastore"), run.path("teacher"), teacher_config(run), progress=False,
                                 dist=dist)
    return {"rank": dist.rank, "seconds": time.perf_counter() - t0, "rows": manifest["rows"]}


def synthetic_keystore(out: Path, rows: int, dim: int, vocab: int, shard_rows: int = 8192, seed: int = 0) -> Path:
    """A keystore of clustered random fp16 keys in the real on-disk format (for memory measurements)."""
    from mlpmem.datastore import FORMAT
    from mlpmem.shards import MANIFEST, save_array, write_json

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(256, dim)).astype(np.float32)
    shards = []
    for index, start in enumerate(range(0, rows, shard_rows)):
        n = min(shard_rows, rows - start)
        cls = rng.integers(0, 256, n)
        keys = (centers[cls] + 0.3 * rng.normal(size=(n, dim))).astype(np.float16)
        values = (cls * (vocab // 256) + rng.integers(0, 2, n)).astype(np.int32)
        files = {"keys": save_array(out, f"keys-{index:05d}.npy", keys),
                 "values": save_array(out, f"values-{index:05d}.npy", values)}
        shards.append({"index": index, "windows": 0, "rows": n, "files": files})
    backbone = {"name": "synthetic", "model_type": "synthetic", "hidden_size": dim, "num_layers": 1,
                "vocab_size": vocab, "tokenizer_sha": "-", "weights_sha": f"seed{seed}"}
    write_json(out / MANIFEST, {"format": FORMAT, "backbone": backbone, "layer": 0, "site": "ffn_input",
                                "rows": rows, "shards": shards, "complete": True})
    return out


def _synthetic_teacher_config():
    from mlpmem.index import IndexConfig
    from mlpmem.teacher import TeacherConfig

    return TeacherConfig(k=32, temperature=10.0, top_k=8, query_batch=2048,
                         index=IndexConfig(kind="ivf_pq", nlist=256, nprobe=8, pq_bytes=32, train_size=20000,
                                           rerank=True))


def worker_memory(store_dir: str, what: str, steps: int) -> dict:
    """Peak RSS of one stage over a synthetic keystore: ``teacher``, ``train`` (rows on demand) or
    ``train-in-ram`` (every key concatenated in RAM first, as before)."""
    import torch

    from mlpmem.datastore import KeyStore
    from mlpmem.index import set_threads
    from mlpmem.memory import MemoryConfig, MLPMemory
    from mlpmem.teacher import TeacherStore, build_teacher
    from mlpmem.train import EvalData, TrainConfig, TrainData, train_memory

    set_threads()
    store_dir = Path(store_dir)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    if what == "teacher":
        build_teacher(store_dir, store_dir.parent / "teacher", _synthetic_teacher_config(), rebuild=True,
                      progress=False)
    else:
        store = KeyStore(store_dir)
        teacher = TeacherStore(store_dir.parent / "teacher", datastore=store)
        fetch = (lambda s, n: s.rows(n)) if what == "train" else (lambda s, n: s.array(n))
        data = TrainData(fetch(store, "keys"), fetch(store, "values"), fetch(teacher, "ids"),
                         fetch(teacher, "probs"), fetch(teacher, "residual"))
        val = EvalData(np.asarray(store.rows("keys")[:512]), np.asarray(store.rows("values")[:512]),
                       np.full(512, -np.log(store.manifest["backbone"]["vocab_size"]), np.float32))
        torch.manual_seed(0)
        memory = MLPMemory(MemoryConfig(input_size=store.hidden_size, vocab_size=store.manifest["backbone"]
                                        ["vocab_size"], intermediate_size=256, num_layers=2))
        cfg = TrainConfig(epochs=1, batch_size=512, checkpoint_every=10**9, eval_lambdas=[0.0, 1.0])
        train_memory(memory, data, val, cfg, store_dir.parent / f"{what}-out", progress=False, stop_after=steps)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss0}


# ---------------------------------------------------------------------------------------------
# Driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(processes: int, args: list[str], env: dict | None = None) -> tuple[float, list[dict]]:
    """Run ``python -m mlpmem.scalebench <args>`` under accelerate launch; wall time and each rank's JSON."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(_free_port()), "-m"] if processes > 1 else [sys.executable, "-m"]
    cmd = [*launcher, "mlpmem.scalebench", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, _results(proc.stdout)


def _python(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "mlpmem.scalebench", *args], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
    return _results(proc.stdout)[0]


def _results(stdout: str) -> list[dict]:
    """The ``RESULT {...}`` JSON objects that the workers printed (ranks may interleave on one line)."""
    return [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", stdout)]


def bench_processes(config: str, out: Path, tokens: int, worlds: list[int]) -> list[dict]:
    rows = []
    for world in worlds:
        run_dir = out / f"procs-{world}"
        for stage in ("datastore", "teacher"):
            wall, ranks = _launch(world, ["worker-stage", config, str(run_dir), str(tokens), stage])
            seconds = max(r["seconds"] for r in ranks)
            rows.append({"stage": stage, "processes": world, "rows": ranks[0]["rows"], "launch_wall_s": wall,
                         "stage_s": seconds, "tokens_per_s": ranks[0]["rows"] / seconds})
    return rows


def bench_memory(out: Path, sizes: list[int], dim: int, vocab: int, steps: int) -> list[dict]:
    rows = []
    for size in sizes:
        store = synthetic_keystore(out / f"synthetic-{size}" / "datastore", size, dim, vocab)
        gib = sum(p.stat().st_size for p in store.glob("*.npy")) / 2**20
        for what in ("teacher", "train", "train-in-ram"):
            r = _python(["worker-memory", str(store), what, str(steps)])
            rows.append({"rows": size, "datastore_mb": gib, "stage": what, **r})
    return rows


def bench_resume(out: Path, size: int) -> dict:
    """Teacher from scratch, then SIGKILLed at half of its shards and rerun."""
    store = out / f"synthetic-{size}" / "datastore"
    teacher = store.parent / "teacher"
    scratch = _python(["worker-memory", str(store), "teacher", "0"])["seconds"]
    shards = len(json.loads((store / "manifest.json").read_text())["shards"])
    shutil.rmtree(teacher)  # the finished scratch build must not be mistaken for the killed run's progress
    cmd = [sys.executable, "-m", "mlpmem.scalebench", "worker-memory", str(store), "teacher", "0"]
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
    subprocess.run([sys.executable, "-c", "from mlpmem.scalebench import _resume_teacher as r; "
                    f"r({str(store)!r})"], check=True, capture_output=True)
    resumed = time.perf_counter() - t0
    return {"rows": size, "shards": shards, "shards_done_at_kill": done, "scratch_s": scratch,
            "resume_s": resumed, "resume_over_scratch": resumed / scratch}


def _resume_teacher(store: str) -> None:
    from mlpmem.teacher import build_teacher

    build_teacher(store, Path(store).parent / "teacher", _synthetic_teacher_config(), progress=False)


def markdown(results: dict, command: str) -> str:
    from mlpmem.bench.common import markdown_table

    lines = [f"# Scaling measurements\n\nCommand: `{command}`\n", "## Throughput with 1 and N processes\n",
             markdown_table(["stage", "processes", "tokens", "launch wall s", "stage s", "tokens/s"],
                            [[r["stage"], r["processes"], r["rows"], f"{r['launch_wall_s']:.1f}", f"{r['stage_s']:.1f}",
                              f"{r['tokens_per_s']:.0f}"] for r in results.get("processes", [])]),
             "\n## Peak RSS against datastore size\n",
             markdown_table(["keys", "datastore MB", "stage", "seconds", "peak RSS MB"],
                            [[r["rows"], f"{r['datastore_mb']:.0f}", r["stage"], f"{r['seconds']:.1f}",
                              f"{r['peak_rss_mb']:.0f}"] for r in results.get("memory", [])])]
    if "resume" in results:
        r = results["resume"]
        lines += ["\n## Resume against rerun from scratch (teacher)\n",
                  markdown_table(["keys", "shards", "shards done at SIGKILL", "scratch s", "resume s",
                                  "resume / scratch"],
                                 [[r["rows"], r["shards"], r["shards_done_at_kill"], f"{r['scratch_s']:.1f}",
                                   f"{r['resume_s']:.1f}", f"{r['resume_over_scratch']:.2f}"]])]
    return "\n".join(lines) + "\n"


def run_bench(config: str, out: str, tokens: int, worlds: list[int], sizes: list[int], dim: int, vocab: int,
              steps: int, docs_dir: str | None, command: str) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"cores": len(os.sched_getaffinity(0))}
    if tokens:
        results["processes"] = bench_processes(config, out, tokens, worlds)
        _write(results, out, docs_dir, command)  # each part is kept as soon as it is measured
    if sizes:
        results["memory"] = bench_memory(out, sizes, dim, vocab, steps)
        _write(results, out, docs_dir, command)
        results["resume"] = bench_resume(out, max(sizes))
        _write(results, out, docs_dir, command)
    return results


def _write(results: dict, out: Path, docs_dir: str | None, command: str) -> None:
    text = markdown(results, command)
    for folder in [out] + ([Path(docs_dir)] if docs_dir else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (folder / "results.md").write_text(text)


def _match_launcher_priority() -> None:
    """torchrun starts its workers in a new session; with Linux autogroup scheduling that session gets the
    default CPU weight, not the launcher's: copy the launcher's autogroup nice so 1 and N processes compete
    for the cores on equal terms on a shared machine."""
    try:
        nice = Path(f"/proc/{os.getppid()}/autogroup").read_text().split("nice")[1].strip()
        Path("/proc/self/autogroup").write_text(nice)
    except (OSError, IndexError):
        pass


def _main(argv: list[str]) -> None:
    _match_launcher_priority()
    what = argv[0]
    if what == "worker-stage":
        result = worker_stage(argv[1], argv[2], int(argv[3]), argv[4])
    elif what == "worker-memory":
        result = worker_memory(argv[1], argv[2], int(argv[3]))
    else:
        raise SystemExit(f"unknown worker {what}")
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])


def add_arguments(parser) -> None:
    """The ``mlpmem bench-scale`` options."""
    parser.add_argument("config", nargs="?", default="configs/quick.yaml", help="config whose corpus/backbone to use")
    parser.add_argument("--out", default="runs/scale", help="work folder (datastores, teachers, results)")
    parser.add_argument("--tokens", type=int, default=2048, help="training tokens for the 1-vs-N process runs (0: skip)")
    parser.add_argument("--processes", default="1,2", help="process counts to compare")
    parser.add_argument("--sizes", default="60000,240000", help="synthetic datastore sizes (keys) for peak RSS")
    parser.add_argument("--dim", type=int, default=576, help="key size of the synthetic datastores")
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary of the synthetic datastores")
    parser.add_argument("--train-steps", type=int, default=60, help="training steps measured per size")
    parser.add_argument("--docs", default="docs/results/scale", help="also write results.md/json here")


def main_from_args(args) -> None:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else []
    command = "mlpmem bench-scale " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "mlpmem bench-scale"
    results = run_bench(args.config, args.out, args.tokens, [int(p) for p in args.processes.split(",")], sizes,
                        args.dim, args.vocab, args.train_steps, args.docs, command)
    print(markdown(results, command))
