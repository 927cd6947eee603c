"""One corpus size, online: ``bench infer`` on its run (the same timer, the same methods), its kNN-LM index and
RAG passages, and the bytes each method needs at inference.

kNN-LM searches the size's own datastore (``knn_keys: run``): exactly at batch 1, and with an IVF-PQ index
(lists sized to the datastore, cached in ``train-<N>/knn-index``, its build time recorded there) where the
datastore holds ``ivfpq_min_keys`` keys and ``pq_bytes`` divides the key size. ``bench infer`` writes its own
report into ``train-<N>/infer``; it is measured again only when its settings changed.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from mlpmem.datastore import KeyStore
from mlpmem.index import IndexConfig
from mlpmem.utils.io import dir_bytes
from mlpmem.utils.shards import read_json
from studies.bench.breakeven.config import BreakEvenConfig
from studies.bench.breakeven.stages import SizeRun
from studies.bench.infer import run as infer
from studies.bench.infer.config import InferBenchConfig
from studies.bench.knn_setup import KnnSetupConfig

ONLINE = ("backbone", "memory", "knnlm-exact", "knnlm", "rag")
"""The methods timed at each size (``knnlm``: IVF-PQ, where the datastore is large enough)."""


def ivfpq_note(cfg: BreakEvenConfig, store: KeyStore) -> str | None:
    """Why kNN-LM is not timed with IVF-PQ at this size (None: it is)."""
    if store.num_rows < cfg.ivfpq_min_keys:
        return f"{store.num_rows:,} keys, fewer than ivfpq_min_keys={cfg.ivfpq_min_keys:,}: exact search only"
    if store.hidden_size % cfg.pq_bytes:
        return f"pq_bytes={cfg.pq_bytes} does not divide the key size {store.hidden_size}: exact search only"
    return None


def infer_config(cfg: BreakEvenConfig, size: SizeRun, ivfpq: bool) -> InferBenchConfig:
    """``bench infer``'s options for one size: no ladder, kNN-LM on the size's own keys."""
    index = IndexConfig(kind="ivf_pq", nlist=0, nprobe=cfg.nprobe, pq_bytes=cfg.pq_bytes)
    knn = KnnSetupConfig(sources=[], min_keys=1, index_dir=str(size.folder / "knn-index"), index=index)
    methods = [m for m in ONLINE if m != "knnlm" or ivfpq]
    return InferBenchConfig(prompt_tokens=cfg.prompt_tokens, new_tokens=cfg.new_tokens, batch_sizes=cfg.batch_sizes,
                            repeats=cfg.repeats, warmup=cfg.warmup, methods=methods, ladder=False,
                            threads=cfg.threads, rag_retriever=cfg.rag_retriever,
                            out_dir=str(size.folder / "infer"), knn=knn, knn_keys="run")


def infer_results(size: SizeRun, icfg: InferBenchConfig, progress: bool) -> dict:
    """``bench infer``'s results on the size's run under ``icfg``: measured now, or read back from ``icfg.out_dir``
    when they were measured under the same settings."""
    saved = Path(icfg.out_dir) / "results.json"
    wanted = json.loads(json.dumps(asdict(icfg), default=str))
    if saved.is_file():
        results = read_json(saved, "bench infer results")
        if results.get("config") == wanted:
            return results
    return json.loads(json.dumps(infer.main(str(size.run.layout.config), icfg, progress=progress), default=str))


def timed_online(cfg: BreakEvenConfig, size: SizeRun, progress: bool) -> dict:
    """``bench infer``'s results for the size (measured now, or read back when its settings are the same)."""
    note = ivfpq_note(cfg, KeyStore(size.run.layout.datastore, verify=False))
    return {**infer_results(size, infer_config(cfg, size, note is None), progress), "ivfpq_note": note}


def index_record(folder: Path) -> dict | None:
    """The IVF-PQ index cached in ``folder``: its record (``build_seconds``, ``nlist``, ``ntotal``) and bytes; None
    if not built."""
    if not (folder / "index.json").is_file():
        return None
    return {**read_json(folder / "index.json", "kNN-LM index record"), "bytes": (folder / "index.faiss").stat().st_size}


def storage(size: SizeRun, online: dict, index: dict | None, finetune: dict) -> dict:
    """Bytes each method needs at inference besides the backbone's weights."""
    rag = online["info"]["rag"]
    datastore = dir_bytes(size.run.layout.datastore)  # fp16 keys + int32 next tokens (+ manifest)
    out = {"backbone": 0, "memory": dir_bytes(size.run.layout.memory), "knnlm-exact": datastore,
           "rag": (rag.get("embedding_bytes") or 0) + rag["text_bytes"],
           "backbone_weights": online["limits"]["backbone_bytes"]}
    if index is not None:
        out["knnlm"] = datastore + index["bytes"]  # codes + lists, and the fp16 keys its re-ranking reads
    for name, values in finetune.items():
        out[name] = values["inference_bytes"]
    return out
