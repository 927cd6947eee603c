"""The kNN teacher: for every datastore position, a sparse next-token distribution from its neighbours.

For query position q with key f(c_q), search k neighbours in the datastore **excluding q's own id**
(search k+1 and mask ``id == q``; never "drop the first hit", which is wrong under ties, PQ noise and
duplicated text), then

    p_kNN(y | c_q) ∝ Σ_{i in N(q)} 1[v_i = y] · exp(−d_i / T),      d = squared L2.

The distribution is stored sparse: the ``top_k`` most probable tokens (int32 ids, fp16 probabilities,
``-1``/0 padding) and the residual mass ``1 − Σ top_k`` (fp32), i.e. ``6·K + 4`` bytes per token.
Teacher shard i covers the rows of datastore shard i, so a killed build resumes shard by shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem.config import Config
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError, CorruptArtifact, FingerprintMismatch
from mlpmem.index import IndexConfig, open_or_build
from mlpmem.utils.distributed import (
    Dist,
    current,
    done_indices,
    finish_build,
    merge_records,
    my_slice,
    open_build,
    write_record,
)
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import (
    MANIFEST,
    ShardedRows,
    load_array,
    read_json,
    release,
    save_array,
    sha256_file,
)

FORMAT = "mlpmem.teacher/1"
Rows = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Sparse targets ``(ids (n, K) int32, probs (n, K) fp32, residual (n,) fp32)``."""
SPARSE_ROWS = 4096
"""Rows turned into sparse targets at once (bounds the aggregation's memory whatever the search batch)."""


@dataclass
class TeacherConfig(Config):
    k: int = 1024
    """Neighbours per query (after excluding the query itself)."""
    temperature: float = 3.0
    """T in exp(−d/T); distances are squared L2 of the keys."""
    top_k: int = 32
    """Tokens kept per position in the sparse target (K)."""
    query_batch: int = 512
    """Queries searched at once (a batch may span datastore shards); an IVF-flat search of a large batch runs list
    by list on a CPU (:mod:`mlpmem.index`), which pays from a few thousand queries."""
    index: IndexConfig = field(default_factory=IndexConfig)

    def validate(self) -> None:
        if isinstance(self.index, dict):
            self.index = IndexConfig(**self.index)
        if self.k < 1 or self.top_k < 1 or self.query_batch < 1:
            raise ConfigError("teacher k, top_k and query_batch must be >= 1")
        if not 0 < self.temperature < float("inf"):
            raise ConfigError(f"teacher temperature must be > 0, got {self.temperature}")


def exclude_and_weight(dists: torch.Tensor, ids: torch.Tensor, query_ids: torch.Tensor | None, k: int,
                       temperature: float) -> torch.Tensor:
    """Weights ``(B, k')``: softmax(−d/T) over the first k valid neighbours (self and ``-1`` ids excluded)."""
    valid = ids >= 0  # (B, k')
    if query_ids is not None:
        valid &= ids != query_ids[:, None]
    keep = valid & (torch.cumsum(valid.long(), dim=1) <= k)
    logits = torch.where(keep, -dists / temperature, torch.full_like(dists, -torch.inf))
    weights = torch.softmax(logits, dim=1)
    return torch.nan_to_num(weights, nan=0.0)  # a row with no valid neighbour gets all-zero weights


def token_totals(tokens: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's tokens sorted, and at every entry the summed weight of its token (vectorized segment sum).

    tokens, weights (B, k), weights >= 0. Returns ``(sorted_tokens, totals, last)``, each (B, k): entries of one
    token share its total exactly; ``last`` marks the last entry of each run of equal tokens.
    """
    sorted_tok, order = torch.sort(tokens, dim=1)  # (B, k)
    csum = torch.cumsum(weights.gather(1, order), dim=1)
    last = torch.ones_like(sorted_tok, dtype=torch.bool)
    last[:, :-1] = sorted_tok[:, 1:] != sorted_tok[:, :-1]  # last element of each run of equal tokens
    run_end = torch.where(last, csum, torch.zeros_like(csum))
    before = torch.cummax(run_end, dim=1).values  # csum at the latest run end <= j (weights >= 0)
    before = torch.cat([torch.zeros_like(before[:, :1]), before[:, :-1]], 1)
    ends = torch.where(last, csum, torch.full_like(csum, torch.inf)).flip(1)
    end = torch.cummin(ends, dim=1).values.flip(1)  # csum at the run end >= j: the end of j's run
    return sorted_tok, end - before, last


def aggregate_by_token(tokens: torch.Tensor, weights: torch.Tensor, top_k: int):
    """Sum weights per distinct token in each row, keep the ``top_k`` largest (vectorized sort + segment sum).

    tokens, weights: (B, k). Returns ids (B, top_k) int64 (−1 padding), probs (B, top_k) fp32, descending.
    """
    sorted_tok, totals, last = token_totals(tokens, weights)
    seg = torch.where(last, totals, torch.full_like(totals, -1.0))  # run totals, −1 elsewhere
    kk = min(top_k, seg.shape[1])
    probs, pos = torch.topk(seg, kk, dim=1)
    ids = sorted_tok.gather(1, pos)
    pad = probs <= 0
    probs = probs.clamp_min(0).masked_fill(pad, 0.0)
    ids = ids.masked_fill(pad, -1)
    if kk < top_k:
        probs = torch.nn.functional.pad(probs, (0, top_k - kk))
        ids = torch.nn.functional.pad(ids, (0, top_k - kk), value=-1)
    return ids, probs


def knn_sparse(dists, ids, values: np.ndarray, query_ids, k: int, temperature: float, top_k: int):
    """Sparse teacher rows from raw search results: ``(ids int32, probs fp32, residual fp32)``."""
    dists_t, ids_t = torch.from_numpy(dists), torch.from_numpy(ids)
    qid = None if query_ids is None else torch.as_tensor(query_ids, dtype=torch.long)
    weights = exclude_and_weight(dists_t, ids_t, qid, k, temperature)  # (B, k')
    tokens = torch.from_numpy(values[np.clip(ids, 0, None)].astype(np.int64))  # (B, k')
    tok, prob = aggregate_by_token(tokens, weights, top_k)
    residual = (weights.sum(1) - prob.sum(1)).clamp_min(0)  # mass outside the top_k tokens
    return tok.to(torch.int32).numpy(), prob.numpy(), residual.numpy().astype(np.float32)


def _settings(store: KeyStore, cfg: TeacherConfig) -> dict:
    return {
        "format": FORMAT,
        "datastore_manifest_sha": sha256_file(store.path / MANIFEST),
        "backbone": store.fingerprint,
        "k": cfg.k,
        "temperature": cfg.temperature,
        "top_k": cfg.top_k,
        "index": cfg.index.settings(),
    }


def build_teacher(datastore_dir: str | Path, out_dir: str | Path, cfg: TeacherConfig, rebuild=False,
                  progress=True, dist: Dist | None = None) -> dict:
    """Search every datastore position's neighbours (self excluded) and store sparse top-K targets.

    Teacher shard s covers datastore shard s. Under ``accelerate launch``/``torchrun`` each process searches
    a contiguous slice of the pending shards against the shared index (a FAISS index is built once, saved
    under ``out_dir/index`` and reopened memory-mapped by every process) and process 0 merges the records.
    """
    dist = dist or current()
    set_threads()
    store = KeyStore(datastore_dir)
    if cfg.k >= store.num_rows:
        raise ConfigError(f"teacher k={cfg.k} must be smaller than the datastore ({store.num_rows} keys)")
    out_dir = Path(out_dir)
    num_shards = len(store.shards)
    manifest = open_build(out_dir, _settings(store, cfg), dict(rows=0, shards=[], complete=False,
                                                                 bytes_per_token=cfg.top_k * 6 + 4), rebuild, dist,
                           "teacher")
    if manifest["complete"]:
        return manifest
    done = done_indices(out_dir, manifest, f"teacher {out_dir}")
    dist.barrier()
    mine = my_slice([s for s in range(num_shards) if s not in done], dist)
    index = open_or_build(store, cfg.index, out_dir / "index", dist)
    values = store.rows("values")
    bar = tqdm(total=sum(store.shards[s]["keys"].shape[0] for s in mine), unit="tok", disable=not progress,
               desc="teacher" if dist.world == 1 else f"teacher [rank {dist.rank}]", dynamic_ncols=True)
    for group in shard_groups(mine, [store.shards[s]["keys"].shape[0] for s in range(num_shards)], cfg.query_batch):
        sparse, start = _search_group(store, group, index, values, cfg, bar), 0
        for s in group:  # each datastore shard's rows to its own teacher shard
            n = store.shards[s]["keys"].shape[0]
            manifest = write_shard(out_dir, manifest, s, [tuple(x[start : start + n] for x in sparse)], num_shards,
                                    dist)
            start += n
    bar.close()
    return finish_build(out_dir, num_shards, dist, "teacher")


def shard_groups(shards: list[int], sizes: list[int], batch: int) -> list[list[int]]:
    """``shards`` in order, cut into runs of consecutive ones that hold at least ``batch`` rows (the last may hold
    fewer): a search batch can span shards, and each run's shards are written before the next is searched."""
    groups, rows = [[]], 0
    for s in shards:
        groups[-1].append(s)
        rows += sizes[s]
        if rows >= batch:
            groups.append([])
            rows = 0
    return [g for g in groups if g]


def _search_group(store: KeyStore, group: list[int], index, values, cfg: TeacherConfig, bar) -> list[np.ndarray]:
    """The sparse targets ``(ids, probs, residual)`` of every row of ``group``'s shards, in row order."""
    keys, ids = _group_keys(store, group)
    parts = []
    for b in range(0, len(keys), cfg.query_batch):
        d, i = index.search(keys[b : b + cfg.query_batch], cfg.k + 1)
        batch_ids = ids[b : b + len(d)]
        for c in range(0, len(d), SPARSE_ROWS):
            rows = slice(c, c + SPARSE_ROWS)
            parts.append(knn_sparse(d[rows], i[rows], values, batch_ids[rows], cfg.k, cfg.temperature, cfg.top_k))
        bar.update(len(d))
    return [np.concatenate(x) for x in zip(*parts)]


def _group_keys(store: KeyStore, group: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The keys (fp32) of ``group``'s shards and their datastore row ids."""
    keys, ids = [], []
    for s in group:
        shard = store.shards[s]["keys"]
        keys.append(np.asarray(shard, dtype=np.float32))
        ids.append(np.arange(int(store.offsets[s]), int(store.offsets[s]) + shard.shape[0]))
        release(shard)
    return np.concatenate(keys), np.concatenate(ids)


def write_shard(out_dir: Path, manifest: dict, index: int, parts, num_shards: int = 0,
                dist: Dist | None = None) -> dict:
    """Teacher shard ``index`` from the sparse row blocks ``parts`` (``(ids, probs, residual)`` each), recorded
    (and, in a single process, merged into the manifest)."""
    ids, probs, residual = (np.concatenate(x) for x in zip(*parts))
    files = {
        "ids": save_array(out_dir, f"ids-{index:05d}.npy", ids.astype(np.int32)),
        "probs": save_array(out_dir, f"probs-{index:05d}.npy", probs.astype(np.float16)),
        "residual": save_array(out_dir, f"residual-{index:05d}.npy", residual.astype(np.float32)),
    }
    write_record(out_dir, {"index": index, "rows": len(ids), "files": files})
    if dist is None or dist.world == 1:
        manifest = merge_records(out_dir, manifest, num_shards, f"teacher {out_dir}")
    return manifest


def top_rows(probs: torch.Tensor, top_k: int, vocab_ids: torch.Tensor | None = None) -> Rows:
    """Sparse rows of distributions ``probs`` (n, V): their top-K tokens (column ids mapped through ``vocab_ids``
    when given, as for a corpus head), probabilities and residual mass, as numpy ``(ids, probs, residual)``."""
    top, cols = torch.topk(probs, min(top_k, probs.shape[1]), dim=-1)  # (n, K)
    ids = cols if vocab_ids is None else vocab_ids[cols]
    residual = (1.0 - top.sum(-1)).clamp_min(0.0)
    return ids.to(torch.int32).cpu().numpy(), top.cpu().numpy(), residual.cpu().numpy().astype(np.float32)


def teacher_rows_at(teacher, rows: np.ndarray) -> Rows:
    """The sparse rows ``rows`` of a teacher (anything with ``.rows("ids" | "probs" | "residual")``)."""
    return (teacher.rows("ids")[rows], teacher.rows("probs")[rows].astype(np.float32),
            teacher.rows("residual")[rows])


class TeacherStore:
    """Read side of the sparse teacher, checked against the datastore it was built from."""

    def __init__(self, path: str | Path, datastore: KeyStore | None = None, verify: bool = True):
        self.path = Path(path)
        what = f"teacher {self.path}"
        self.manifest = read_json(self.path / MANIFEST, what)
        if self.manifest.get("format") != FORMAT:
            raise CorruptArtifact(f"{what}: {MANIFEST} is not a teacher manifest")
        if not self.manifest.get("complete"):
            raise CorruptArtifact(f"{what} is incomplete (its build was interrupted): rerun the teacher stage")
        if datastore is not None:
            if sha256_file(datastore.path / MANIFEST) != self.manifest["datastore_manifest_sha"]:
                raise FingerprintMismatch(f"{what} was built from another datastore than {datastore.path}")
        self.shards = [
            {name: load_array(self.path, entry, verify, what) for name, entry in s["files"].items()}
            for s in self.manifest["shards"]
        ]

    @property
    def num_rows(self) -> int:
        return int(self.manifest["rows"])

    def array(self, name: str) -> np.ndarray:
        return np.concatenate([s[name] for s in self.shards])

    def rows(self, name: str) -> ShardedRows:
        """One field (``ids``, ``probs``, ``residual``) as rows read on demand from the shards."""
        return ShardedRows([s[name] for s in self.shards])
