"""Stage 3, kNN-LM (Khandelwal et al., 2020): p = (1 − λ)·p_LM + λ·p_kNN, mixed after softmax in log space.

Evaluation queries (validation/test keys) search the training datastore once for their ``k_max``
nearest neighbours; the neighbour lists (distances, next tokens) are cached, so the sweep over k
(a prefix of the list), T and λ needs no further search. The cache records the checksums of its
files, verified by every reader (:func:`open_neighbours`), and what it was searched from (the
datastore, the queries, the index): it is searched again when any of them changed. Settings are
chosen on validation and applied unchanged to test.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem import freshness
from mlpmem.backbone import check_fingerprint
from mlpmem.config import Config
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError, CorpusError, CorruptArtifact, FingerprintMismatch
from mlpmem.index import IndexConfig, build_index
from mlpmem.inference.mixing import check_lambda, mix
from mlpmem.inference.perplexity import perplexity
from mlpmem.pipeline.run import Run
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import MANIFEST, load_array, read_json, save_array, sha256_file, write_json


@dataclass
class KnnLMConfig(Config):
    k_grid: list[int] = field(default_factory=lambda: [16, 64, 256, 1024])
    temperature_grid: list[float] = field(default_factory=lambda: [1.0, 2.0, 3.0, 5.0, 10.0])
    lambda_grid: list[float] = field(default_factory=lambda: [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5])
    query_batch: int = 512
    exact: bool = True
    """Search evaluation queries exactly (brute force) even when the teacher uses an approximate index."""

    def validate(self) -> None:
        if not self.k_grid or min(self.k_grid) < 1:
            raise ConfigError("knnlm k_grid must hold integers >= 1")
        if not self.temperature_grid or min(self.temperature_grid) <= 0:
            raise ConfigError("knnlm temperature_grid must hold values > 0")
        for lam in self.lambda_grid:
            check_lambda(lam, "knnlm lambda")

    @property
    def k_max(self) -> int:
        return max(self.k_grid)


NEIGHBOURS = "neighbours.json"


def neighbour_inputs(store: KeyStore, queries: KeyStore, index_cfg: IndexConfig | None) -> dict:
    """What a split's neighbour lists depend on: the datastore and the queries (their manifests, which hold every
    shard's checksum) and the index searched (``exact`` or its settings)."""
    return {"datastore": sha256_file(store.path / MANIFEST), "queries": sha256_file(queries.path / MANIFEST),
            "index": "exact" if index_cfg is None else index_cfg.settings()}


def open_neighbours(out_dir: str | Path, k: int | None = None, verify: bool = True):
    """The cached neighbour lists of one split, memory-mapped and checked against their recorded checksums:
    dists fp32 ``(n, k)`` and datastore ids int64 ``(n, k)`` (the first ``k`` of each row; all if None)."""
    out_dir = Path(out_dir)
    what = f"kNN-LM neighbour lists {out_dir}"
    meta = read_json(out_dir / NEIGHBOURS, what)
    files = meta.get("files")
    if not isinstance(files, dict) or set(files) != {"dists", "ids"}:
        raise CorruptArtifact(f"{what} carry no checksums (an older mlpmem wrote them): rerun `mlpmem knnlm CONFIG`")
    if k is not None and meta["k"] < k:
        raise CorruptArtifact(f"{what} hold {meta['k']} neighbours per query, not {k}: rerun `mlpmem knnlm CONFIG`")
    redo = "search them again with `mlpmem knnlm CONFIG --rebuild`"
    dists, ids = (load_array(out_dir, files[name], verify, what, redo) for name in ("dists", "ids"))
    return dists[:, :k], ids[:, :k]


def cached_neighbours(out_dir: Path, k: int, inputs: dict):
    """The cached lists if they were searched from ``inputs`` with at least ``k`` neighbours and verify, else None
    (a damaged cache is said so, then searched again)."""
    path = out_dir / NEIGHBOURS
    if not path.is_file():
        return None
    meta = read_json(path, f"kNN-LM neighbour lists {out_dir}")
    if not freshness.is_current(meta.get("inputs"), inputs) or meta.get("k", 0) < k or "files" not in meta:
        return None
    try:
        return open_neighbours(out_dir, k)
    except CorruptArtifact as exc:
        print(f"note: {str(exc).split('; ')[0]}: searching them again", file=sys.stderr)
        return None


def _search(index, queries: KeyStore, k: int, out_dir: Path, batch: int, progress: bool, inputs: dict):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / NEIGHBOURS).unlink(missing_ok=True)  # the lists below are no longer the recorded ones
    keys = queries.array("keys")
    dists, ids = np.empty((len(keys), k), np.float32), np.empty((len(keys), k), np.int64)
    for b in tqdm(range(0, len(keys), batch), desc=f"kNN search {queries.path.name}", disable=not progress,
                  dynamic_ncols=True):
        dists[b : b + batch], ids[b : b + batch] = index.search(np.asarray(keys[b : b + batch], np.float32), k)
    files = {"dists": save_array(out_dir, "dists.npy", dists), "ids": save_array(out_dir, "ids.npy", ids)}
    write_json(out_dir / NEIGHBOURS, {"k": k, "queries": str(queries.path), "rows": len(keys), "inputs": inputs,
                                      "files": files})
    return dists, ids


def knn_target_logprob(dists: torch.Tensor, neighbour_tokens: torch.Tensor, targets: torch.Tensor, k: int,
                       temperature: float) -> torch.Tensor:
    """log p_kNN(target) for each query from its first k neighbours; −inf where no neighbour has it."""
    logw = torch.log_softmax(-dists[:, :k] / temperature, dim=1)  # (n, k)
    hit = neighbour_tokens[:, :k] == targets[:, None]
    return torch.logsumexp(logw.masked_fill(~hit, -torch.inf), dim=1)  # (n,)


@dataclass
class EvalSplit:
    """What the sweep needs of one evaluation split."""

    lm_logprob: torch.Tensor  # (n,)
    dists: torch.Tensor  # (n, k_max)
    neighbour_tokens: torch.Tensor  # (n, k_max)
    targets: torch.Tensor  # (n,)

    @classmethod
    def load(cls, queries: KeyStore, dists, ids, datastore_values: np.ndarray) -> EvalSplit:
        return cls(
            lm_logprob=torch.from_numpy(queries.array("lm").astype(np.float64)),
            dists=torch.from_numpy(np.asarray(dists, np.float64)),
            neighbour_tokens=torch.from_numpy(datastore_values[np.clip(ids, 0, None)].astype(np.int64)),
            targets=torch.from_numpy(queries.array("values").astype(np.int64)),
        )

    def ppl(self, k: int, temperature: float, lam: float) -> float:
        if lam == 0.0:
            return perplexity(self.lm_logprob)
        lp_knn = knn_target_logprob(self.dists, self.neighbour_tokens, self.targets, k, temperature)
        return perplexity(mix(self.lm_logprob, lp_knn, lam, logits=False))


def sweep(split: EvalSplit, cfg: KnnLMConfig) -> list[dict]:
    """Perplexity for every (k, T, λ) of the grid."""
    rows = []
    for k, temp in itertools.product(cfg.k_grid, cfg.temperature_grid):
        lp_knn = knn_target_logprob(split.dists, split.neighbour_tokens, split.targets, k, temp)
        for lam in cfg.lambda_grid:
            mixed = split.lm_logprob if lam == 0 else mix(split.lm_logprob, lp_knn, lam, logits=False)
            rows.append({"k": k, "temperature": temp, "lambda": lam, "ppl": perplexity(mixed)})
    return rows


def best(rows: list[dict]) -> dict:
    """The lowest-perplexity setting; ties go to the smaller λ (closer to the backbone)."""
    finite = [r for r in rows if math.isfinite(r["ppl"])]
    return min(finite, key=lambda r: (r["ppl"], r["lambda"]))


def stage_knnlm(run: Run, rebuild: bool = False) -> dict:
    """Search eval queries once (``rebuild``: again), sweep (k, T, λ) on validation, apply the best to test."""
    set_threads()
    cfg = run.cfg.knnlm
    store = KeyStore(run.layout.datastore)
    if cfg.k_max > store.num_rows:
        raise CorpusError(f"knnlm k={cfg.k_max} is larger than the datastore ({store.num_rows} keys)")
    index_cfg = None if cfg.exact else run.cfg.teacher.index
    index = None
    splits = {}
    for split in ("validation", "test"):
        queries = KeyStore(run.layout.keystore(split))
        _check_same_keys(store, queries)
        t0 = time.perf_counter()
        folder, inputs = run.layout.neighbours(split), neighbour_inputs(store, queries, index_cfg)
        if rebuild:
            (folder / NEIGHBOURS).unlink(missing_ok=True)
        found = cached_neighbours(folder, cfg.k_max, inputs)
        cached = found is not None
        if not cached:
            index = index or build_index(store, index_cfg or IndexConfig(kind="exact"))
            found = _search(index, queries, cfg.k_max, folder, cfg.query_batch, run.progress, inputs)
        dists, ids = found
        if not cached:  # a reused neighbour list is not a measurement
            run.record_timing(f"knn_search_{split}", queries=queries.num_rows, seconds=time.perf_counter() - t0)
        splits[split] = EvalSplit.load(queries, dists, ids, store.array("values"))
    rows = sweep(splits["validation"], cfg)
    chosen = best(rows)
    results = {
        "chosen": {k: chosen[k] for k in ("k", "temperature", "lambda")},
        "validation": {"backbone_ppl": splits["validation"].ppl(1, 1.0, 0.0), "knnlm_ppl": chosen["ppl"]},
        "test": {
            "backbone_ppl": splits["test"].ppl(1, 1.0, 0.0),
            "knnlm_ppl": splits["test"].ppl(chosen["k"], chosen["temperature"], chosen["lambda"]),
            "tokens": int(splits["test"].targets.numel()),
        },
        "datastore_tokens": store.num_rows,
        "sweep": rows,
    }
    write_json(run.layout.knnlm_results, results)
    return results


def _check_same_keys(store, queries) -> None:
    check_fingerprint(store.fingerprint, queries.fingerprint, f"evaluation keystore {queries.path}")
    for key in ("layer", "site", "block_size", "stride"):
        if store.manifest[key] != queries.manifest[key]:
            raise FingerprintMismatch(f"{queries.path} uses {key}={queries.manifest[key]}, the datastore "
                                      f"{store.manifest[key]}")
