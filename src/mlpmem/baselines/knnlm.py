"""kNN-LM as a decoder: at every decoding step, search the datastore and mix (for speed comparisons).

:class:`KnnLMDecoder` mirrors :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM`: a key hook in the
backbone's own forward captures f(c_t) at the datastore's layer and site, and a forward hook on the backbone replaces
``output.logits`` (B, T_keep, V) by

    log((1 - lam) softmax(lm_logits) + lam p_kNN),   p_kNN(y) ∝ Σ_i 1[v_i = y] exp(−d_i / T)

over the k nearest datastore keys of each kept position (``index.search`` on the CPU, the step's
bottleneck), so the stock ``generate`` and hand-written decode loops both work.

:class:`CombinedKeyStore` presents several read-only keystores of the same backbone, layer and site as
one datastore (rows concatenated in order), and :func:`cached_index` trains an IVF-PQ index over it once
and stores it (``faiss.write_index``) with a JSON record of its sources, so later runs load it in seconds.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import faiss
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlpmem.backbone import KeyHook, check_fingerprint, keep_positions
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError, FingerprintMismatch, MlpmemError
from mlpmem.index import FaissIndex, IndexConfig
from mlpmem.inference.hooks import BackboneWrapper
from mlpmem.inference.mixing import check_lambda
from mlpmem.teacher import exclude_and_weight, token_totals
from mlpmem.utils.shards import (
    MANIFEST,
    ShardedRows,
    read_json,
    sha256_file,
    write_json,
)


class CombinedKeyStore:
    """Read-only keystores of one backbone/layer/site seen as one datastore: row ids run across them in order."""

    def __init__(self, paths: list[str | Path], verify: bool = False):
        if not paths:
            raise ConfigError("CombinedKeyStore needs at least one keystore")
        self.stores = [KeyStore(p, verify=verify) for p in paths]
        first = self.stores[0]
        for store in self.stores[1:]:
            check_fingerprint(first.fingerprint, store.fingerprint, f"keystore {store.path}")
            for key in ("layer", "site"):
                if store.manifest[key] != first.manifest[key]:
                    raise FingerprintMismatch(f"keystore {store.path} has {key}={store.manifest[key]}, "
                                              f"{first.path} {first.manifest[key]}")
        self.path = Path(first.path)  # for messages
        self.offsets = np.cumsum([0] + [s.num_rows for s in self.stores])

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def hidden_size(self) -> int:
        return self.stores[0].hidden_size

    @property
    def fingerprint(self) -> dict:
        return self.stores[0].fingerprint

    @property
    def layer(self) -> int:
        return int(self.stores[0].manifest["layer"])

    @property
    def site(self) -> str:
        return self.stores[0].manifest["site"]

    def array(self, name: str) -> np.ndarray:
        return np.concatenate([s.array(name) for s in self.stores])

    def rows(self, name: str) -> ShardedRows:
        """One field across every keystore as one lazily read array of rows (see KeyStore.rows)."""
        return ShardedRows([shard[name] for store in self.stores for shard in store.shards])

    def iter_shards(self, name: str):
        for offset, store in zip(self.offsets, self.stores):
            for start, shard in store.iter_shards(name):
                yield int(offset) + start, shard

    def sources(self) -> list[dict]:
        """What identifies the combination: each keystore's path, rows and manifest sha256."""
        return [{"path": str(s.path), "rows": s.num_rows, "manifest_sha256": sha256_file(s.path / MANIFEST)}
                for s in self.stores]


def cached_index(store: CombinedKeyStore, cfg: IndexConfig, folder: str | Path, progress: bool = True) -> FaissIndex:
    """An IVF-PQ (or IVF-flat) index over ``store``, trained once and cached in ``folder``.

    The cache (``index.faiss`` + ``index.json``) is reused only if it was built from the same keystores
    (manifest sha256s) with the same index settings; otherwise it is rebuilt and replaced atomically.
    """
    folder = Path(folder)
    kind = cfg.resolved_kind(store.num_rows)
    if kind == "exact":
        raise ConfigError("cached_index builds FAISS indexes: set index kind to ivf_pq or ivf_flat")
    record = {"sources": store.sources(), "config": cfg.settings(), "kind": kind}
    meta, path = folder / "index.json", folder / "index.faiss"
    if meta.exists() and path.exists():
        saved = read_json(meta, "cached index record")
        if {k: saved.get(k) for k in record} == record:
            index = faiss.read_index(str(path))
            index.nprobe = saved["nprobe"]
            return FaissIndex(index, store, rerank=cfg.rerank and kind == "ivf_pq")
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if progress:
        print(f"building a {kind} index over {store.num_rows:,} keys (cached in {folder}) ...", flush=True)
    built = FaissIndex.build(store, cfg, kind)
    tmp = folder / ".index.faiss.tmp"
    faiss.write_index(built.index, str(tmp))
    tmp.rename(path)
    write_json(meta, {**record, "nprobe": int(built.index.nprobe), "ntotal": int(built.index.ntotal),
                      "nlist": int(built.index.nlist), "build_seconds": time.perf_counter() - t0})
    return built


def knn_mix_log_probs(logp_lm: torch.Tensor, dists: np.ndarray, ids: np.ndarray, values: np.ndarray,
                      temperature: float, lam: float) -> torch.Tensor:
    """log((1 − lam) p_LM + lam p_kNN) (N, V) from log p_LM (N, V) and the neighbours of its N queries (N, k).

    Equal to mixing a dense (N, V) p_kNN (softmax(−d/T) weights summed per next token) in log space, without it:
    every token keeps log p_LM + log(1 − lam) but the few the neighbours predict, which are mixed one by one (in
    float64)."""
    lam = check_lambda(lam, "lam")
    if lam == 0.0:
        return logp_lm
    d, i = torch.from_numpy(dists).double(), torch.from_numpy(ids)  # (N, k)
    weights = exclude_and_weight(d, i, None, i.shape[1], temperature)  # (N, k), −1 ids get 0
    tokens = torch.from_numpy(values[np.clip(ids, 0, None)].astype(np.int64))  # (N, k)
    tokens, totals, _ = token_totals(tokens, weights)  # entries of one token share its p_kNN
    tokens, totals = tokens.to(logp_lm.device), totals.to(logp_lm.device)
    keep = math.log1p(-lam) if lam < 1.0 else -math.inf
    out = logp_lm + keep
    mixed = torch.logaddexp(logp_lm.gather(1, tokens).double() + keep, math.log(lam) + totals.log())
    return out.scatter_(1, tokens, mixed.to(out.dtype))  # a token's entries all write the same value


class KnnLMDecoder(BackboneWrapper):
    """A frozen causal LM mixed with kNN-LM at every forward (``lam`` weight of p_kNN, k neighbours, T)."""

    def __init__(self, backbone: nn.Module, index, values: np.ndarray, layer: int, site: str, k: int = 1024,
                 temperature: float = 1.0, lam: float = 0.25):
        super().__init__()
        if k < 1 or not temperature > 0:
            raise ConfigError("kNN-LM k must be >= 1 and temperature > 0")
        self.backbone, self.index, self.values = backbone, index, values
        self.layer, self.site, self.k, self.temperature = layer, site, k, float(temperature)
        self.lam = check_lambda(lam, "lam")
        self.vocab_size = int(backbone.get_output_embeddings().weight.shape[0])
        self.search_seconds = 0.0  # accumulated time inside index.search (for the benchmark's breakdown)
        self._key_hook: KeyHook | None = None
        self._handle = None

    @contextlib.contextmanager
    def active(self):
        """Install the key and mixing hooks on the backbone for the duration."""
        if self._key_hook is not None:
            raise MlpmemError("KnnLMDecoder.active() is not re-entrant")
        self._key_hook = KeyHook(self.backbone, self.layer, self.site).__enter__()
        self._handle = self.backbone.register_forward_hook(self._mix_hook, with_kwargs=True)
        try:
            yield self
        finally:
            self._handle.remove()
            self._key_hook.__exit__(None, None, None)
            self._key_hook = self._handle = None

    def _mix_hook(self, module, args, kwargs, output):
        keys, self._key_hook.keys = self._key_hook.keys, None
        if keys is None:
            raise MlpmemError(f"no key was captured at layer {self.layer} ({self.site})")
        lm_logits = output.logits  # (B, T_keep, V)
        output.logits = self.mix(lm_logits, keep_positions(keys, lm_logits, kwargs.get("logits_to_keep")))
        return output

    def mix(self, lm_logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """log((1 − lam) p_LM + lam p_kNN) for logits (B, T, V) and keys (B, T, d)."""
        logp_lm = F.log_softmax(lm_logits.float(), dim=-1)  # (B, T, V)
        if self.lam == 0.0:
            return logp_lm
        queries = keys.reshape(-1, keys.shape[-1]).float().cpu().numpy()  # (B*T, d)
        t0 = time.perf_counter()
        dists, ids = self.index.search(queries, self.k)  # (B*T, k) each
        self.search_seconds += time.perf_counter() - t0
        flat = logp_lm.reshape(-1, logp_lm.shape[-1])
        return knn_mix_log_probs(flat, dists, ids, self.values, self.temperature, self.lam).view_as(logp_lm)
