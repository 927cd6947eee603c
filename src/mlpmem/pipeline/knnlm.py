"""Stage 3, kNN-LM (Khandelwal et al., 2020): p = (1 − λ)·p_LM + λ·p_kNN, mixed after softmax in log space.

Evaluation queries (validation/test keys) search the training datastore once for their ``k_max``
nearest neighbours; the neighbour lists (distances, next tokens) are cached, so the sweep over k
(a prefix of the list), T and λ needs no further search. Settings are chosen on validation and
applied unchanged to test.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem.backbone import check_fingerprint
from mlpmem.config import Config
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError, CorpusError, FingerprintMismatch
from mlpmem.index import IndexConfig, build_index
from mlpmem.inference.mixing import check_lambda, mix_log_probs
from mlpmem.inference.perplexity import perplexity
from mlpmem.pipeline.run import Run
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import read_json, save_array, write_json


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


def search_neighbours(index, queries: KeyStore, k: int, out_dir: Path, batch: int = 512, progress=True):
    """Neighbour lists of every query row: dists fp32 ``(n, k)``, datastore ids int64 ``(n, k)``; cached."""
    out_dir = Path(out_dir)
    meta = out_dir / "neighbours.json"
    if meta.exists() and read_json(meta, "neighbours")["k"] >= k:
        return np.load(out_dir / "dists.npy", mmap_mode="r")[:, :k], np.load(out_dir / "ids.npy", mmap_mode="r")[:, :k]
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = queries.array("keys")
    dists, ids = np.empty((len(keys), k), np.float32), np.empty((len(keys), k), np.int64)
    for b in tqdm(range(0, len(keys), batch), desc=f"kNN search {queries.path.name}", disable=not progress,
                  dynamic_ncols=True):
        dists[b : b + batch], ids[b : b + batch] = index.search(np.asarray(keys[b : b + batch], np.float32), k)
    save_array(out_dir, "dists.npy", dists)
    save_array(out_dir, "ids.npy", ids)
    write_json(meta, {"k": k, "queries": str(queries.path), "rows": len(keys)})
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
        return perplexity(mix_log_probs(self.lm_logprob, lp_knn, lam))


def sweep(split: EvalSplit, cfg: KnnLMConfig) -> list[dict]:
    """Perplexity for every (k, T, λ) of the grid."""
    rows = []
    for k, temp in itertools.product(cfg.k_grid, cfg.temperature_grid):
        lp_knn = knn_target_logprob(split.dists, split.neighbour_tokens, split.targets, k, temp)
        for lam in cfg.lambda_grid:
            mixed = split.lm_logprob if lam == 0 else mix_log_probs(split.lm_logprob, lp_knn, lam)
            rows.append({"k": k, "temperature": temp, "lambda": lam, "ppl": perplexity(mixed)})
    return rows


def best(rows: list[dict]) -> dict:
    """The lowest-perplexity setting; ties go to the smaller λ (closer to the backbone)."""
    finite = [r for r in rows if math.isfinite(r["ppl"])]
    return min(finite, key=lambda r: (r["ppl"], r["lambda"]))


def stage_knnlm(run: Run) -> dict:
    """Search eval queries once, sweep (k, T, λ) on validation, apply the best to test."""
    set_threads()
    cfg = run.cfg.knnlm
    store = KeyStore(run.layout.datastore)
    if cfg.k_max > store.num_rows:
        raise CorpusError(f"knnlm k={cfg.k_max} is larger than the datastore ({store.num_rows} keys)")
    index = None
    splits = {}
    for split in ("validation", "test"):
        queries = KeyStore(run.layout.keystore(split))
        _check_same_keys(store, queries)
        t0 = time.perf_counter()
        cached = (run.layout.neighbours(split) / "neighbours.json").exists()
        if not cached:
            index_cfg = IndexConfig(kind="exact") if cfg.exact else run.cfg.teacher.index
            index = index or build_index(store, index_cfg)
        dists, ids = search_neighbours(index, queries, cfg.k_max, run.layout.neighbours(split), cfg.query_batch,
                                             run.progress)
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
