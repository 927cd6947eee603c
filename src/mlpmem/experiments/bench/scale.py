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
4. **Sharding.** ``--shard-steps`` training steps of a wide memory (``--shard-width``, 8 blocks) on the smaller
   synthetic store with 2 processes, DDP against FSDP: each process's peak RSS and the time per step.
5. **Corpus size.** The datastore stage (training split: tokenize to disk, then encode every window) over the
   config corpus's training documents repeated ``--corpus-repeats`` times, with a random 2-layer backbone that
   has the config's tokenizer (so millions of tokens encode in minutes; the backbone's weights are the same
   constant at every size). Next to it, the peak RSS of tokenizing the same split in RAM (the old way).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
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
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.run import Run

    cfg = PipelineConfig.from_yaml(config, [f"run_dir={run_dir}", f"corpus.max_tokens={{train: {tokens}}}"])
    return Run(cfg, progress=False)


def worker_stage(config: str, run_dir: str, tokens: int, stage: str) -> dict:
    """One stage of a real run under the launcher; returns this process's seconds and rows."""
    from mlpmem.datastore import build_keystore
    from mlpmem.pipeline.corpus import split_tokens
    from mlpmem.pipeline.teacher import teacher_config
    from mlpmem.teacher import build_teacher
    from mlpmem.utils.distributed import current
    from mlpmem.utils.runtime import set_threads

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


def worker_corpus(run_dir: str, mode: str) -> dict:
    """Peak RSS over a corpus prepared by :func:`repeated_corpus`: ``stream`` runs the datastore stage's training
    split (tokenized to disk, windows encoded from the memory map); ``in-ram`` only tokenizes the split into
    arrays held in RAM, as the stage did before."""
    from mlpmem.corpora.documents import read_documents, split_files, tokenize_documents
    from mlpmem.datastore import build_keystore
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.corpus import corpus_folder, split_tokens
    from mlpmem.pipeline.run import Run
    from mlpmem.utils.runtime import set_threads

    set_threads()
    run = Run(PipelineConfig.from_yaml(Path(run_dir) / "config.yaml"), progress=False)
    cfg, (model, tokenizer) = run.cfg, run.backbone
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    if mode == "stream":
        shutil.rmtree(run.path("tokens"), ignore_errors=True)  # tokenizing is part of what is measured
        docs = split_tokens(run, "train")
        rows = build_keystore(model, tokenizer, docs, run.path("datastore"), layer=cfg.backbone.layer,
                              site=cfg.backbone.site, block_size=cfg.corpus.block_size, stride=cfg.corpus.stride,
                              batch_size=cfg.datastore.batch_size, batches_per_shard=cfg.datastore.batches_per_shard,
                              precision=cfg.backbone.precision, rebuild=True, progress=False)["rows"]
    else:
        docs = tokenize_documents(read_documents(split_files(corpus_folder(run))["train"]), tokenizer)
        rows = sum(len(d) - 1 for d in docs)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss0,
            "tokens": int(rows)}


def worker_sharding(store_dir: str, sharding: str, steps: int, width: int) -> dict:
    """Under the launcher: ``steps`` training steps of an 8-block memory of intermediate size ``width`` on a
    synthetic keystore with ``train.sharding = sharding``; this process's peak RSS and seconds."""
    from mlpmem.utils.distributed import current
    from mlpmem.utils.runtime import set_threads

    dist = current()
    set_threads()
    store_dir = Path(store_dir)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    parameters = train_synthetic(store_dir, store_dir.parent / f"shard-{sharding}-{dist.rank}", steps, width=width,
                                 layers=8, batch_size=256, sharding=sharding)
    return {"rank": dist.rank, "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
            "rss_before_mb": rss0, "parameters": parameters}


def repeated_corpus(config: str, out: Path, repeats: int, overrides: list[str] = ()) -> Path:
    """A run folder whose corpus is ``config``'s training documents repeated ``repeats`` times (validation and
    test unchanged) and whose backbone is a random 2-layer Llama with the config's tokenizer; returns it."""
    import yaml

    from mlpmem.corpora.documents import split_files
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.corpus import corpus_folder
    from mlpmem.pipeline.run import Run

    cfg = PipelineConfig.from_yaml(config, [*overrides, f"run_dir={out / 'source'}"])
    source = split_files(corpus_folder(Run(cfg, progress=False)))
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    docs = [json.loads(line) for line in source["train"].read_text().splitlines()]
    with open(corpus / "train.jsonl", "w") as f:
        for r in range(repeats):
            f.writelines(json.dumps({"id": f"{d['id']}#{r}", "text": d["text"]}) + "\n" for d in docs)
    for split in ("validation", "test"):
        shutil.copy(source[split], corpus / f"{split}.jsonl")
    raw = cfg.to_dict()
    raw.update(run_dir=str(out / "run"), corpus={**raw["corpus"], "name": None, "path": str(corpus), "max_tokens": {}},
               backbone={**raw["backbone"], "name": str(tiny_backbone(cfg.backbone.name, out.parent / "backbone"))})
    (out / "run").mkdir(parents=True, exist_ok=True)
    (out / "run" / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out / "run"


def tiny_backbone(name: str, folder: Path) -> Path:
    """A random 2-layer Llama (d = 64, seed 0) with the tokenizer of backbone ``name``, saved once to ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mlpmem.backbone import load_backbone

    if (folder / "config.json").is_file():
        return folder
    tokenizer = load_backbone(name)[1]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=2048, tie_word_embeddings=True))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def synthetic_keystore(out: Path, rows: int, dim: int, vocab: int, shard_rows: int = 8192, seed: int = 0) -> Path:
    """A keystore of clustered random fp16 keys in the real on-disk format (for memory measurements)."""
    from mlpmem.datastore import FORMAT
    from mlpmem.utils.shards import MANIFEST, save_array, write_json

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
    from mlpmem.teacher import build_teacher
    from mlpmem.utils.runtime import set_threads

    set_threads()
    store_dir = Path(store_dir)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    if what == "teacher":
        build_teacher(store_dir, store_dir.parent / "teacher", _synthetic_teacher_config(), rebuild=True,
                      progress=False)
    else:
        train_synthetic(store_dir, store_dir.parent / f"{what}-out", steps, in_ram=what == "train-in-ram")
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss0}


def train_synthetic(store_dir: Path, out: Path, steps: int, in_ram: bool = False, width: int = 256, layers: int = 2,
                    batch_size: int = 512, sharding: str = "ddp") -> int:
    """``steps`` training steps of a seeded memory over a synthetic keystore and its teacher, rows read on demand
    from the shards (or, ``in_ram``, every field concatenated in RAM first); returns the memory's parameters."""
    import torch

    from mlpmem.datastore import KeyStore
    from mlpmem.memory.model import MemoryConfig, MLPMemory
    from mlpmem.teacher import TeacherStore
    from mlpmem.training.loop import EvalData, TrainConfig, TrainData, train_memory

    store = KeyStore(store_dir)
    teacher = TeacherStore(store_dir.parent / "teacher", datastore=store)
    fetch = (lambda s, n: s.array(n)) if in_ram else (lambda s, n: s.rows(n))
    data = TrainData(fetch(store, "keys"), fetch(store, "values"), fetch(teacher, "ids"), fetch(teacher, "probs"),
                     fetch(teacher, "residual"))
    vocab = store.manifest["backbone"]["vocab_size"]
    val = EvalData(np.asarray(store.rows("keys")[:512]), np.asarray(store.rows("values")[:512]),
                   np.full(512, -np.log(vocab), np.float32))
    torch.manual_seed(0)
    memory = MLPMemory(MemoryConfig(input_size=store.hidden_size, vocab_size=vocab, intermediate_size=width,
                                    num_layers=layers))
    cfg = TrainConfig(epochs=1, batch_size=batch_size, checkpoint_every=10**9, eval_lambdas=[0.0, 1.0],
                      sharding=sharding)
    train_memory(memory, data, val, cfg, out, progress=False, stop_after=steps)
    return sum(p.numel() for p in memory.parameters())


# ---------------------------------------------------------------------------------------------
# Driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(processes: int, args: list[str], env: dict | None = None) -> tuple[float, list[dict]]:
    """Run ``python -m mlpmem.experiments.bench.scale <args>`` under accelerate launch; wall time and each rank's JSON."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(_free_port()), "-m"] if processes > 1 else [sys.executable, "-m"]
    cmd = [*launcher, "mlpmem.experiments.bench.scale", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, _results(proc.stdout)


def _python(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "mlpmem.experiments.bench.scale", *args], capture_output=True, text=True)
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


def bench_sharding(out: Path, size: int, dim: int, vocab: int, steps: int, width: int) -> list[dict]:
    store = out / f"synthetic-{size}" / "datastore"
    if not (store / "manifest.json").is_file():
        synthetic_keystore(store, size, dim, vocab)
    if not (store.parent / "teacher" / "manifest.json").is_file():
        _python(["worker-memory", str(store), "teacher", "0"])
    rows = []
    # FSDP on CPU turns on glibc's mmap threshold itself (train.return_large_frees_to_os); DDP is measured with
    # the default allocator and with the same setting, so that the comparison is like for like.
    for sharding, mmap_frees in (("ddp", False), ("ddp", True), ("fsdp", True)):
        shutil.rmtree(store.parent / f"shard-{sharding}-0", ignore_errors=True)
        env = {"MALLOC_MMAP_THRESHOLD_": "1048576"} if mmap_frees and sharding == "ddp" else None
        _, ranks = _launch(2, ["worker-sharding", str(store), sharding, str(steps), str(width)], env)
        rows += [{"sharding": sharding, "mmap_frees": mmap_frees, "steps": steps, "width": width, **r}
                 for r in sorted(ranks, key=lambda r: r["rank"])]
    return rows


def bench_corpus(config: str, out: Path, repeats: list[int]) -> list[dict]:
    rows = []
    for r in repeats:
        run_dir = repeated_corpus(config, out / f"corpus-x{r}", r)
        corpus_mb = (run_dir.parent / "corpus" / "train.jsonl").stat().st_size / 2**20
        for mode in ("stream", "in-ram"):
            rows.append({"repeats": r, "corpus_mb": corpus_mb, "mode": mode,
                         **_python(["worker-corpus", str(run_dir), mode])})
    return rows


def bench_resume(out: Path, size: int) -> dict:
    """Teacher from scratch, then SIGKILLed at half of its shards and rerun."""
    store = out / f"synthetic-{size}" / "datastore"
    teacher = store.parent / "teacher"
    scratch = _python(["worker-memory", str(store), "teacher", "0"])["seconds"]
    shards = len(json.loads((store / "manifest.json").read_text())["shards"])
    shutil.rmtree(teacher)  # the finished scratch build must not be mistaken for the killed run's progress
    cmd = [sys.executable, "-m", "mlpmem.experiments.bench.scale", "worker-memory", str(store), "teacher", "0"]
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
    subprocess.run([sys.executable, "-c", "from mlpmem.experiments.bench.scale import _resume_teacher as r; "
                    f"r({str(store)!r})"], check=True, capture_output=True)
    resumed = time.perf_counter() - t0
    return {"rows": size, "shards": shards, "shards_done_at_kill": done, "scratch_s": scratch,
            "resume_s": resumed, "resume_over_scratch": resumed / scratch}


def _resume_teacher(store: str) -> None:
    from mlpmem.teacher import build_teacher

    build_teacher(store, Path(store).parent / "teacher", _synthetic_teacher_config(), progress=False)


SECTIONS = {
    "processes": ("Throughput with 1 and N processes", "",
                  ["stage", "processes", "tokens", "launch wall s", "stage s", "tokens/s"],
                  lambda r: [r["stage"], r["processes"], r["rows"], f"{r['launch_wall_s']:.1f}", f"{r['stage_s']:.1f}",
                             f"{r['tokens_per_s']:.0f}"]),
    "memory": ("Peak RSS against datastore size", "", ["keys", "datastore MB", "stage", "seconds", "peak RSS MB"],
               lambda r: [r["rows"], f"{r['datastore_mb']:.0f}", r["stage"], f"{r['seconds']:.1f}",
                          f"{r['peak_rss_mb']:.0f}"]),
    "resume": ("Resume against rerun from scratch (teacher)", "",
               ["keys", "shards", "shards done at SIGKILL", "scratch s", "resume s", "resume / scratch"],
               lambda r: [r["rows"], r["shards"], r["shards_done_at_kill"], f"{r['scratch_s']:.1f}",
                          f"{r['resume_s']:.1f}", f"{r['resume_over_scratch']:.2f}"]),
    "sharding": ("DDP against FSDP, 2 processes",
                 "Large frees returned to the OS: glibc `M_MMAP_THRESHOLD` = 1 MiB (FSDP on CPU sets it itself; DDP "
                 "is shown with and without it).\n",
                 ["sharding", "large frees returned", "process", "memory parameters", "steps", "s / step",
                  "RSS before training MB", "peak RSS MB"],
                 lambda r: [r["sharding"], "yes" if r.get("mmap_frees") else "no", r["rank"], f"{r['parameters']:,}",
                            r["steps"], f"{r['seconds'] / r['steps']:.2f}", f"{r['rss_before_mb']:.0f}",
                            f"{r['peak_rss_mb']:.0f}"]),
    "corpus": ("Peak RSS of the datastore stage against corpus size",
               "Training split = the config corpus's training documents repeated; a random 2-layer backbone (d = 64) "
               "with the config's tokenizer. *stream*: the stage as it runs (tokenized to disk, windows encoded from "
               "the memory map); *in-ram*: only tokenizing the split into arrays in RAM, as before.\n",
               ["repeats", "corpus MB", "tokens", "mode", "seconds", "peak RSS MB"],
               lambda r: [r["repeats"], f"{r['corpus_mb']:.0f}", r["tokens"], r["mode"], f"{r['seconds']:.1f}",
                          f"{r['peak_rss_mb']:.0f}"]),
}
"""Each measured part's heading, note, table columns and row formatter."""


def markdown(results: dict, command: str) -> str:
    """The measured parts as Markdown, each under the command that measured it (parts not measured are left out)."""
    from mlpmem.experiments.bench.common import markdown_table

    lines = ["# Scaling measurements\n"]
    for part, (title, note, columns, row) in SECTIONS.items():
        rows = results.get(part)
        if not rows:
            continue
        rows = [rows] if isinstance(rows, dict) else rows
        command_of = results.get("commands", {}).get(part, command)
        lines += [f"## {title}\n", f"Command: `{command_of}`\n", *([note] if note else []),
                  markdown_table(columns, [row(r) for r in rows]), ""]
    return "\n".join(lines)


def run_bench(config: str, out: str, tokens: int, worlds: list[int], sizes: list[int], dim: int, vocab: int,
              steps: int, docs_dir: str | None, command: str, repeats: list[int] = (), shard_steps: int = 0,
              shard_width: int = 4096) -> dict:
    """Measure the requested parts; parts measured by an earlier command into the same ``out`` are kept (each part
    records the command that measured it) and every part is written as soon as it is measured."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    previous = out / "results.json"
    results = json.loads(previous.read_text()) if previous.is_file() else {}
    results["cores"] = len(os.sched_getaffinity(0))
    commands = results.setdefault("commands", {})
    parts = {"processes": (tokens, lambda: bench_processes(config, out, tokens, worlds)),
             "memory": (sizes, lambda: bench_memory(out, sizes, dim, vocab, steps)),
             "resume": (sizes, lambda: bench_resume(out, max(sizes))),
             "sharding": (shard_steps, lambda: bench_sharding(out, min(sizes or [60000]), dim, vocab, shard_steps,
                                                              shard_width)),
             "corpus": (repeats, lambda: bench_corpus(config, out, repeats))}
    for part, (wanted, measure) in parts.items():
        if wanted:
            results[part], commands[part] = measure(), command
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
    elif what == "worker-sharding":
        result = worker_sharding(argv[1], argv[2], int(argv[3]), int(argv[4]))
    elif what == "worker-corpus":
        result = worker_corpus(argv[1], argv[2])
    else:
        raise SystemExit(f"unknown worker {what}")
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])


def add_arguments(parser) -> None:
    """The ``mlpmem bench-scale`` options."""
    parser.add_argument("config", nargs="?", default="configs/quick.yaml", help="config whose corpus/backbone to use")
    parser.add_argument("--out", default="runs/scale", help="work folder (datastores, teachers, results)")
    parser.add_argument("--tokens", type=int, default=2048,
                        help="training tokens for the 1-vs-N process runs (0: skip)")
    parser.add_argument("--processes", default="1,2", help="process counts to compare")
    parser.add_argument("--sizes", default="60000,240000", help="synthetic datastore sizes (keys) for peak RSS")
    parser.add_argument("--dim", type=int, default=576, help="key size of the synthetic datastores")
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary of the synthetic datastores")
    parser.add_argument("--train-steps", type=int, default=60, help="training steps measured per size")
    parser.add_argument("--shard-steps", type=int, default=10, help="training steps for DDP vs FSDP (0: skip)")
    parser.add_argument("--shard-width", type=int, default=4096, help="intermediate size of the DDP/FSDP memory")
    parser.add_argument("--corpus-repeats", default="4,16",
                        help="times the training split is repeated for the datastore stage's peak RSS (empty: skip)")
    parser.add_argument("--docs", default="docs/results/scale", help="also write results.md/json here")


def main_from_args(args) -> None:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else []
    command = "mlpmem bench-scale " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 else "mlpmem bench-scale"
    results = run_bench(args.config, args.out, args.tokens, [int(p) for p in args.processes.split(",")], sizes,
                        args.dim, args.vocab, args.train_steps, args.docs, command,
                        [int(r) for r in args.corpus_repeats.split(",") if r.strip()], args.shard_steps,
                        args.shard_width)
    print(markdown(results, command))
