"""What runs in the benchmark's subprocesses: one stage each, reporting its seconds and peak RSS.

Started by :mod:`.launch` as ``python -m studies.bench.scale WORKER ARGS`` (under ``accelerate launch``
for several processes); :func:`main` prints the result as one ``RESULT {json}`` line for the driver to read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import time
from pathlib import Path

from mlpmem.corpora.documents import read_documents, split_files, tokenize_documents
from mlpmem.datastore import build_keystore
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import corpus_folder, split_tokens
from mlpmem.pipeline.datastore import keystore_config
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import teacher_config
from mlpmem.teacher import build_teacher
from mlpmem.utils.distributed import current
from mlpmem.utils.runtime import set_threads
from studies.bench.scale.synthetic import synthetic_teacher_config, train_synthetic


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_run(config: str, run_dir: str, tokens: int) -> Run:
    cfg = PipelineConfig.from_yaml(config, [f"run_dir={run_dir}", f"corpus.max_tokens={{train: {tokens}}}"])
    return Run(cfg, progress=False)


def worker_stage(config: str, run_dir: str, tokens: int, stage: str) -> dict:
    """One stage of a real run under the launcher; returns this process's seconds and rows."""
    dist = current()
    set_threads()
    run = _load_run(config, run_dir, tokens)
    cfg = run.cfg
    if stage == "datastore":
        docs = split_tokens(run, "train")
        model, tokenizer = run.backbone
        dist.barrier()
        t0 = time.perf_counter()
        config = dataclasses.replace(keystore_config(cfg), batches_per_shard=1, pack=False)
        manifest = build_keystore(config, model, tokenizer, docs, run.path("datastore"), progress=False, dist=dist)
    else:
        dist.barrier()
        t0 = time.perf_counter()
        manifest = build_teacher(run.path("datastore"), run.path("teacher"), teacher_config(run), progress=False,
                                 dist=dist)
    return {"rank": dist.rank, "seconds": time.perf_counter() - t0, "rows": manifest["rows"]}


def worker_corpus(run_dir: str, mode: str) -> dict:
    """Peak RSS over a corpus prepared by :func:`~.corpus.repeated_corpus`: ``stream`` runs the datastore stage's
    training split (tokenized to disk, windows encoded from the memory map); ``in-ram`` only tokenizes the split
    into arrays held in RAM, as the stage did before."""
    set_threads()
    run = Run(PipelineConfig.from_yaml(Path(run_dir) / "config.yaml"), progress=False)
    cfg, (model, tokenizer) = run.cfg, run.backbone
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    if mode == "stream":
        shutil.rmtree(run.path("tokens"), ignore_errors=True)  # tokenizing is part of what is measured
        docs = split_tokens(run, "train")
        config = dataclasses.replace(keystore_config(cfg), pack=False)
        rows = build_keystore(config, model, tokenizer, docs, run.path("datastore"), rebuild=True,
                              progress=False)["rows"]
    else:
        docs = tokenize_documents(read_documents(split_files(corpus_folder(run))["train"]), tokenizer)
        rows = sum(len(d) - 1 for d in docs)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss0,
            "tokens": int(rows)}


def worker_sharding(store_dir: str, sharding: str, steps: int, width: int) -> dict:
    """Under the launcher: ``steps`` training steps of an 8-block memory of intermediate size ``width`` on a
    synthetic keystore with ``train.sharding = sharding``; this process's peak RSS and seconds."""
    dist = current()
    set_threads()
    store = Path(store_dir)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    parameters = train_synthetic(store, store.parent / f"shard-{sharding}-{dist.rank}", steps, width=width,
                                 layers=8, batch_size=256, sharding=sharding)
    return {"rank": dist.rank, "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
            "rss_before_mb": rss0, "parameters": parameters}


def worker_memory(store_dir: str, what: str, steps: int) -> dict:
    """Peak RSS of one stage over a synthetic keystore: ``teacher``, ``train`` (rows on demand) or
    ``train-in-ram`` (every key concatenated in RAM first, as before)."""
    set_threads()
    store = Path(store_dir)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    if what == "teacher":
        build_teacher(store, store.parent / "teacher", synthetic_teacher_config(), rebuild=True, progress=False)
    else:
        train_synthetic(store, store.parent / f"{what}-out", steps, in_ram=what == "train-in-ram")
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss0}


def match_launcher_priority() -> None:
    """torchrun starts its workers in a new session; with Linux autogroup scheduling that session gets the
    default CPU weight, not the launcher's: copy the launcher's autogroup nice so 1 and N processes compete
    for the cores on equal terms on a shared machine."""
    try:
        nice = Path(f"/proc/{os.getppid()}/autogroup").read_text().split("nice")[1].strip()
        Path("/proc/self/autogroup").write_text(nice)
    except (OSError, IndexError):
        pass


WORKERS = {
    "worker-stage": lambda a: worker_stage(a[0], a[1], int(a[2]), a[3]),
    "worker-memory": lambda a: worker_memory(a[0], a[1], int(a[2])),
    "worker-sharding": lambda a: worker_sharding(a[0], a[1], int(a[2]), int(a[3])),
    "worker-corpus": lambda a: worker_corpus(a[0], a[1]),
}
"""Each worker's name on the command line and how its string arguments are passed."""


def main(argv: list[str]) -> None:
    """Run the worker ``argv[0]`` with the arguments ``argv[1:]``; print its result as ``RESULT {json}``."""
    match_launcher_priority()
    if argv[0] not in WORKERS:
        raise SystemExit(f"unknown worker {argv[0]}")
    result = WORKERS[argv[0]](argv[1:])
    print("RESULT " + json.dumps(result), flush=True)
