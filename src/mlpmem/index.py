"""Nearest-neighbour search over datastore keys (squared L2).

- ``exact``: brute force in torch, ``|q|^2 - 2 q.K^T + |K|^2`` with ``addmm`` over key chunks and a running
  top-k merge (faster than ``faiss.IndexFlatL2`` on small CPUs: the study ``bench offline``); for datastores that
  fit in RAM. With ``precision: bf16`` the scan runs in bf16 matmuls (several times the fp32 matmul rate on CPUs
  with AVX512-BF16 or AMX) to pick ``k + k/4`` candidates, whose distances are then recomputed exactly in fp32
  and sorted: the distances returned are exact, only a neighbour near the k-th may be swapped for one just beyond it.
- ``ivf_flat`` / ``ivf_pq``: FAISS inverted lists (coarse quantizer trained on a seeded sample; IVF-PQ stores
  ``pq_bytes``-byte codes), filled shard by shard. PQ distances are approximate: ``rerank`` recomputes the
  exact distances of the candidates from the fp16 keys and re-sorts them. On a CPU, an IVF-flat search of a batch
  with at least :data:`LIST_BATCH` queries per probed list runs list by list (FAISS's ``big_batch_search``: one
  distance matmul per inverted list for all the queries that probe it, instead of every query streaming its lists
  from memory): the same lists are probed, the distances agree to float rounding (``|q|^2 - 2 q.x + |x|^2``), so
  only neighbours tied to rounding may swap; several times faster on large batches
  (``python -m studies bench offline``).
Every search returns ``(dists (B, k) fp32, ids (B, k) int64)``, ascending, ids = datastore row ids
(``-1`` where fewer than k candidates were found).

Datastores larger than RAM: the FAISS indexes read keys one shard at a time (the training sample is
gathered row by row from the memory-mapped shards), :meth:`FaissIndex.save` writes the index atomically
with its sha256, and :func:`open_or_build` reopens it memory-mapped (``IO_FLAG_MMAP``: the codes stay on
disk) after checking the checksum, so a rerun or another process never rebuilds it. When FAISS sees GPUs
(the ``faiss-gpu`` build), search runs on them (``index_cpu_to_all_gpus``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np
import torch
from faiss.contrib.big_batch_search import big_batch_search

from mlpmem.config import Config
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.utils.shards import read_json, sha256_file, write_json, writing

KINDS = ("auto", "exact", "ivf_flat", "ivf_pq")
LIST_BATCH = 64
"""Queries per probed inverted list (batch × nprobe / nlist) from which a CPU IVF-flat search runs list by list."""
SEARCH_PRECISIONS = ("fp32", "bf16")


@dataclass
class IndexConfig(Config):
    kind: str = "auto"
    """``exact``, ``ivf_flat``, ``ivf_pq``, or ``auto`` (exact up to ``exact_max`` keys, else IVF-PQ)."""
    exact_max: int = 2_000_000
    nlist: int = 0
    """Inverted lists; 0 picks ``4 * sqrt(N)`` rounded to a power of two, capped at 4096."""
    nprobe: int = 32
    pq_bytes: int = 64
    rerank: bool = True
    train_size: int = 100_000
    seed: int = 0
    precision: str = "fp32"
    """Exact search only: ``bf16`` scans in bf16 and re-ranks the candidates in fp32 (module docstring)."""

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"index kind must be one of {KINDS}, got {self.kind!r}")
        if self.precision not in SEARCH_PRECISIONS:
            raise ConfigError(f"index precision must be one of {SEARCH_PRECISIONS}, got {self.precision!r}")
        if self.nprobe < 1 or self.nlist < 0 or self.pq_bytes < 1:
            raise ConfigError("index nprobe and pq_bytes must be >= 1 and nlist >= 0")

    def settings(self) -> dict:
        """The fields recorded with what the index built (teachers, saved indexes)."""
        return asdict(self)

    def resolved_kind(self, num_keys: int) -> str:
        if self.kind != "auto":
            return self.kind
        return "exact" if num_keys <= self.exact_max else "ivf_pq"

    def resolved_nlist(self, num_keys: int) -> int:
        if self.nlist:
            return self.nlist
        return int(min(4096, 2 ** round(math.log2(max(4 * math.sqrt(num_keys), 1)))))


def _check_finite(keys: np.ndarray, where: str) -> None:
    if not np.isfinite(keys).all():
        raise CorruptArtifact(f"{where} holds NaN/Inf keys")


class ExactIndex:
    """Brute-force squared-L2 search in torch (fp32, or a bf16 scan re-ranked in fp32)."""

    def __init__(self, keys: np.ndarray, chunk: int = 65536, precision: str = "fp32", rerank_batch: int = 64):
        _check_finite(keys, "the datastore")
        if precision not in SEARCH_PRECISIONS:
            raise ConfigError(f"exact search precision must be one of {SEARCH_PRECISIONS}, got {precision!r}")
        self.keys = torch.from_numpy(np.asarray(keys, dtype=np.float32))  # (N, d)
        self.norms = (self.keys * self.keys).sum(1)  # (N,)
        self.chunk, self.precision, self.rerank_batch = chunk, precision, rerank_batch
        self.low = self.keys.to(torch.bfloat16) if precision == "bf16" else None  # (N, d)

    @property
    def ntotal(self) -> int:
        return self.keys.shape[0]

    @torch.no_grad()
    def search(self, queries: np.ndarray | torch.Tensor, k: int):
        q = torch.as_tensor(np.asarray(queries, dtype=np.float32))  # (B, d)
        qn = (q * q).sum(1, keepdim=True)  # (B, 1)
        if self.low is None:
            d, i = self._scan(q, qn, k)
        else:
            _, candidates = self._scan(q, qn, k + max(16, k // 4))
            d, i = self._rerank(q, qn, candidates, k)
        return _pad(d.clamp_min_(0).numpy(), i.numpy(), k)

    def _scan(self, q: torch.Tensor, qn: torch.Tensor, k: int):
        """The k smallest distances over every key chunk (running top-k merge), ascending."""
        low_q = q.to(torch.bfloat16) if self.low is not None else None
        best_d = torch.full((q.shape[0], 0), float("inf"))
        best_i = torch.zeros((q.shape[0], 0), dtype=torch.long)
        for start in range(0, self.ntotal, self.chunk):
            norms = self.norms[start : start + self.chunk] + qn  # (B, C)
            if low_q is None:
                d = torch.addmm(norms, q, self.keys[start : start + self.chunk].T, alpha=-2.0)  # (B, C)
            else:
                d = norms - 2.0 * (low_q @ self.low[start : start + self.chunk].T).float()  # (B, C)
            kk = min(k, d.shape[1])
            dv, di = torch.topk(d, kk, dim=1, largest=False)
            best_d, order = torch.topk(torch.cat([best_d, dv], 1), min(k, best_d.shape[1] + kk), 1, largest=False)
            best_i = torch.cat([best_i, di + start], 1).gather(1, order)
        return best_d, best_i

    def _rerank(self, q: torch.Tensor, qn: torch.Tensor, candidates: torch.Tensor, k: int):
        """Exact fp32 distances of each row's candidates (B, c), the k smallest kept, ascending."""
        dists = torch.empty(candidates.shape)
        for b in range(0, len(q), self.rerank_batch):  # (b, c, d) fp32 gathers stay ~100 MB
            ids = candidates[b : b + self.rerank_batch]
            dots = torch.einsum("bd,bcd->bc", q[b : b + self.rerank_batch], self.keys[ids])
            dists[b : b + self.rerank_batch] = self.norms[ids] + qn[b : b + self.rerank_batch] - 2.0 * dots
        d, order = torch.topk(dists, min(k, dists.shape[1]), dim=1, largest=False)
        return d, candidates.gather(1, order)


def _pad(d: np.ndarray, i: np.ndarray, k: int):
    if d.shape[1] < k:
        extra = k - d.shape[1]
        d = np.pad(d, ((0, 0), (0, extra)), constant_values=np.inf)
        i = np.pad(i, ((0, 0), (0, extra)), constant_values=-1)
    return d.astype(np.float32), i.astype(np.int64)


class FaissIndex:
    """FAISS IVF-flat / IVF-PQ over a keystore, filled shard by shard, with optional exact re-ranking."""

    def __init__(self, index, store=None, rerank: bool = False):
        self.index, self.store, self.rerank = index, store, rerank
        self._all_keys = None
        self.list_batches = True  # False: every batch searched query by query (FAISS's search), for comparisons

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    @classmethod
    def build(cls, store, cfg: IndexConfig, kind: str) -> FaissIndex:
        n, d = store.num_rows, store.hidden_size
        nlist = min(cfg.resolved_nlist(n), max(1, n // 39))  # FAISS wants >= 39 training points per list
        quantizer = faiss.IndexFlatL2(d)
        if kind == "ivf_flat":
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_L2)
        else:
            if d % cfg.pq_bytes:
                raise ConfigError(f"pq_bytes={cfg.pq_bytes} must divide the key size {d}")
            index = faiss.IndexIVFPQ(quantizer, d, nlist, cfg.pq_bytes, 8)
        rng = np.random.default_rng(cfg.seed)
        sample = np.sort(rng.choice(n, size=min(n, max(cfg.train_size, 256 * 39)), replace=False))
        train = np.asarray(_rows(store)[sample], dtype=np.float32)  # (S, d): the only keys held at once
        _check_finite(train, f"datastore {store.path}")
        index.train(train)
        del train
        for start, shard in store.iter_shards("keys"):
            _check_finite(shard, f"datastore {store.path} (shard at row {start})")
            index.add(np.asarray(shard, dtype=np.float32))
        index.nprobe = min(cfg.nprobe, nlist)
        return cls(index, store, rerank=cfg.rerank and kind == "ivf_pq")

    def save(self, folder: str | Path, settings: dict) -> None:
        """Write ``index.faiss`` atomically and ``index.json`` with its sha256 and the settings it was built with."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "index.faiss.tmp"
        index = faiss.index_gpu_to_cpu(self.index) if hasattr(faiss, "index_gpu_to_cpu") and _on_gpu(self.index) \
            else self.index
        with writing(tmp):
            try:
                faiss.write_index(index, str(tmp))
            except RuntimeError as exc:  # FAISS reports a failed fwrite as a RuntimeError
                raise OSError(errno.ENOSPC, str(exc).splitlines()[0]) from None
        os.replace(tmp, folder / "index.faiss")
        write_json(folder / "index.json", {"sha256": sha256_file(folder / "index.faiss"), "ntotal": self.ntotal,
                                           "rerank": self.rerank, **settings})

    @classmethod
    def open(cls, folder: str | Path, store, settings: dict) -> FaissIndex:
        """Reopen a saved index memory-mapped; raises if it fails its checksum or was built otherwise."""
        folder = Path(folder)
        meta = read_json(folder / "index.json", f"index {folder}")
        for key, value in settings.items():
            if meta.get(key) != value:
                raise CorruptArtifact(f"index {folder} was built with {key}={meta.get(key)!r}, not {value!r}")
        if sha256_file(folder / "index.faiss") != meta["sha256"]:
            raise CorruptArtifact(f"index {folder}/index.faiss fails its checksum (truncated or corrupted)")
        index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        return cls(_to_gpu(index), store, rerank=meta["rerank"])

    def search(self, queries, k: int):
        q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
        if self.list_by_list(len(q)):
            with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
                d, i = big_batch_search(self.index, q, k, method="pairwise_distances", verbose=1)
        else:
            d, i = self.index.search(q, k)
        d = np.where(i < 0, np.inf, d)  # FAISS leaves its heap's initial value where fewer than k were found
        if self.rerank:
            d, i = self._exact_rerank(q, i)
        return _pad(d, i, k)

    def list_by_list(self, num_queries: int) -> bool:
        """Whether a batch of ``num_queries`` is searched list by list (CPU IVF-flat, enough queries per list)."""
        index = self.index
        return (self.list_batches and type(index) is faiss.IndexIVFFlat and
                num_queries * index.nprobe >= LIST_BATCH * index.nlist)

    def _exact_rerank(self, q: np.ndarray, ids: np.ndarray):
        if self._all_keys is None:
            self._all_keys = _rows(self.store)
        cand = self._all_keys[np.clip(ids, 0, None)].astype(np.float32)  # (B, k, d), gathered from the shards
        d = ((cand - q[:, None, :]) ** 2).sum(-1)
        d[ids < 0] = np.inf
        order = np.argsort(d, axis=1, kind="stable")
        return np.take_along_axis(d, order, 1), np.take_along_axis(ids, order, 1)


def _rows(store):
    """The keys of a store as rows read on demand (a KeyStore), or its in-memory array (a plain store)."""
    return store.rows("keys") if hasattr(store, "rows") else store.array("keys")


def _on_gpu(index) -> bool:
    return "Gpu" in type(index).__name__


def _to_gpu(index):
    """Move a FAISS index to every visible GPU when FAISS was built with GPU support (faiss-gpu)."""
    if hasattr(faiss, "index_cpu_to_all_gpus") and faiss.get_num_gpus() > 0:
        return faiss.index_cpu_to_all_gpus(index)
    return index


def build_index(store, cfg: IndexConfig):
    """The index that ``cfg`` asks for over a :class:`~mlpmem.datastore.KeyStore`."""
    kind = cfg.resolved_kind(store.num_rows)
    if kind == "exact":
        return ExactIndex(store.array("keys"), precision=cfg.precision)
    index = FaissIndex.build(store, cfg, kind)
    index.index = _to_gpu(index.index)
    return index


def open_or_build(store, cfg: IndexConfig, folder: str | Path, dist=None):
    """The index of ``cfg`` over ``store``, saved in ``folder`` and reopened (checksum verified) when a
    previous run or another process already built it; exact indexes are the keys themselves (not saved)."""
    kind = cfg.resolved_kind(store.num_rows)
    if kind == "exact":
        return build_index(store, cfg)
    settings = {"kind": kind, "config": cfg.settings(), "datastore_rows": store.num_rows,
                "datastore_manifest_sha": sha256_file(Path(store.path) / "manifest.json")}
    folder = Path(folder)
    if dist is None or dist.is_main:
        try:
            FaissIndex.open(folder, store, settings)
        except CorruptArtifact:  # missing, stale or damaged: build it (again)
            FaissIndex.build(store, cfg, kind).save(folder, settings)
    if dist is not None:
        dist.barrier()
    return FaissIndex.open(folder, store, settings)
