"""Synthetic keystores in the real on-disk format, for measurements that need more keys than a backbone extracts
here: clustered random keys (the scale study's memory and sharding measurements) and keys resampled from a real
keystore (kNN-LM's search cost beyond the corpus).

Both are written by :func:`write_keystore`: shard ``i`` depends only on the seed and ``i``, the manifest records the
settings it was made from (:func:`mlpmem.utils.shards.resume_manifest`), so a build of the same settings resumes
after its last recorded shard (or is reused whole) and one of other settings is replaced.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mlpmem.baselines.knnlm import CombinedKeyStore
from mlpmem.datastore import FORMAT
from mlpmem.errors import CorruptArtifact
from mlpmem.utils.shards import MANIFEST, resume_manifest, save_array, write_json

RESAMPLE_NOISE = 0.1
"""A resampled key is a source key plus Gaussian noise of this many standard deviations of each dimension."""
RESAMPLE_SHARD_ROWS = 1 << 16


def write_keystore(out: Path, settings: dict, rows: int, shard_rows: int,
                   make_shard: Callable[[int, int], tuple[np.ndarray, np.ndarray]]) -> Path:
    """A keystore of ``rows`` rows in ``out``, shard ``i`` being ``make_shard(i, n)``: ``(keys (n, d) fp16,
    next tokens (n,) int32)``; ``settings`` (``format``, ``backbone``, ``layer``, ``site`` and what made the keys)
    go into its manifest."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        manifest = resume_manifest(out, settings, "synthetic keystore", _fresh())
    except CorruptArtifact:  # made with other settings, or a shard that no longer verifies: start again
        shutil.rmtree(out)
        out.mkdir(parents=True)
        manifest = resume_manifest(out, settings, "synthetic keystore", _fresh())
    for index in range(len(manifest["shards"]), math.ceil(rows / shard_rows)):
        keys, values = make_shard(index, min(shard_rows, rows - index * shard_rows))
        files = {"keys": save_array(out, f"keys-{index:05d}.npy", keys),
                 "values": save_array(out, f"values-{index:05d}.npy", values)}
        manifest["shards"].append({"index": index, "windows": 0, "rows": len(values), "files": files})
        manifest["rows"] += len(values)
        write_json(out / MANIFEST, manifest)
    if not manifest["complete"]:
        write_json(out / MANIFEST, {**manifest, "complete": True})
    return out


def _fresh() -> dict:
    return {"rows": 0, "shards": [], "complete": False}


def synthetic_keystore(out: Path, rows: int, dim: int, vocab: int, shard_rows: int = 8192, seed: int = 0) -> Path:
    """A keystore of clustered random fp16 keys (256 centres) under a made-up backbone (for memory measurements)."""
    centers = np.random.default_rng(seed).normal(size=(256, dim)).astype(np.float32)  # (256, dim)

    def shard(index: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, index])
        cls = rng.integers(0, 256, n)
        keys = (centers[cls] + 0.3 * rng.normal(size=(n, dim))).astype(np.float16)  # (n, dim)
        return keys, (cls * (vocab // 256) + rng.integers(0, 2, n)).astype(np.int32)

    backbone = {"name": "synthetic", "model_type": "synthetic", "hidden_size": dim, "num_layers": 1,
                "vocab_size": vocab, "tokenizer_sha": "-", "weights_sha": f"seed{seed}"}
    settings = {"format": FORMAT, "backbone": backbone, "layer": 0, "site": "ffn_input",
                "synthetic": {"kind": "clustered", "rows": rows, "shard_rows": shard_rows, "seed": seed}}
    return write_keystore(out, settings, rows, shard_rows, shard)


def resampled_keys(store: CombinedKeyStore, out: Path, rows: int, seed: int = 0) -> Path:
    """``rows`` keys with ``store``'s fingerprint (so the two combine): each a key of ``store`` drawn at random plus
    Gaussian noise (:data:`RESAMPLE_NOISE`), with that key's next token, so an index's lists fill as around the real
    keys."""
    keys, values = store.array("keys"), store.array("values")  # (n, d) fp16, (n,)
    std = _key_std(keys)  # (d,)

    def shard(index: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, index])
        pick = rng.integers(0, len(keys), n)
        noise = RESAMPLE_NOISE * std * rng.standard_normal((n, keys.shape[1]), dtype=np.float32)
        return (keys[pick] + noise).astype(np.float16), values[pick]

    settings = {"format": FORMAT, "backbone": store.fingerprint, "layer": store.layer, "site": store.site,
                "synthetic": {"kind": "resampled", "sources": store.sources(), "rows": rows, "noise": RESAMPLE_NOISE,
                              "seed": seed, "shard_rows": RESAMPLE_SHARD_ROWS}}
    return write_keystore(out, settings, rows, RESAMPLE_SHARD_ROWS, shard)


def _key_std(keys: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Each dimension's standard deviation over ``keys`` (n, d), accumulated in float64 chunk by chunk: (d,)."""
    total, square = np.zeros(keys.shape[1]), np.zeros(keys.shape[1])
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk].astype(np.float64)
        total += part.sum(0)
        square += (part * part).sum(0)
    mean = total / len(keys)
    return np.sqrt(np.maximum(square / len(keys) - mean * mean, 0.0)).astype(np.float32)
