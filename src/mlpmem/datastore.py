"""Datastore: (key, next token) pairs of a frozen backbone over a corpus, in memory-mapped shards.

One *keystore* per split: ``keys-NNNNN.npy`` fp16 ``[n, d]`` and ``values-NNNNN.npy`` int32 ``[n]``
(the next token), plus, for evaluation splits, ``lm-NNNNN.npy`` fp32 ``[n]``, the backbone's
log-probability of that token. The training split's keystore is the kNN datastore; its keys come
from a truncated forward (layers above the key layer never run). Row ``i`` of the concatenated
shards is datastore id ``i``. A shard holds a fixed number of windows, so a resumed build runs the very
same batches and writes byte-identical shards.

What a keystore is built from is a :class:`KeystoreConfig` (the pipeline makes it from its ``backbone:``,
``corpus:`` and ``datastore:`` sections, :func:`mlpmem.pipeline.datastore.keystore_config`); the manifest records
it, with the backbone's fingerprint and the corpus checksum, as :mod:`mlpmem.freshness` settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from mlpmem.backbone import (
    KeyHook,
    base_model,
    check_fingerprint,
    extract_keys,
    fingerprint,
    output_logits,
    resolve_layer,
)
from mlpmem.compute import autocast, check_precision, inference_scope, model_device, resolve_precision
from mlpmem.config import Config
from mlpmem.corpora.documents import (
    Window,
    corpus_hash,
    document_lengths,
    make_windows,
    release_pages,
)
from mlpmem.errors import ConfigError, CorruptArtifact, MlpmemError
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
from mlpmem.utils.shards import MANIFEST, ShardedRows, load_array, read_json, save_array

FORMAT = "mlpmem.keystore/1"


@dataclass
class KeystoreConfig(Config):
    """Everything the bytes of a keystore depend on, besides the backbone and the corpus."""

    layer: int | float = -1
    """Key layer: an index (negative from the end) or a depth fraction in (0, 1]."""
    site: Literal["ffn_input", "residual"] = "ffn_input"
    block_size: int = 512
    """Tokens per window."""
    stride: int = 256
    """Tokens between window starts; each window scores the targets the previous one did not."""
    batch_size: int = 4
    """Windows per forward."""
    batches_per_shard: int = 16
    with_lm: bool = False
    """Also store the backbone's log-probability of each target (the evaluation splits)."""
    precision: str = "fp32"
    """The decoder's precision (``auto`` is resolved on the model's device before it is recorded)."""

    def validate(self) -> None:
        check_precision(self.precision)
        if self.batch_size < 1 or self.batches_per_shard < 1:
            raise ConfigError("datastore batch_size and batches_per_shard must be >= 1")
        if not 0 < self.stride <= self.block_size:
            raise ConfigError(f"corpus.stride must be in (0, block_size={self.block_size}], got {self.stride}")
        if isinstance(self.layer, float) and not 0 < self.layer <= 1:
            raise ConfigError(f"backbone.layer as a fraction must be in (0, 1], got {self.layer}")


@dataclass
class EncodedBatch:
    keys: np.ndarray  # (n, d) fp16
    values: np.ndarray  # (n,) int32
    lm_logprob: np.ndarray | None  # (n,) fp32


def pad_windows(token_docs: Sequence[np.ndarray], windows: Sequence[Window], pad_id: int = 0,
                device: torch.device | str = "cpu"):
    """Right-padded ``input_ids`` and ``attention_mask`` ``(B, T)`` of a batch of windows, on ``device`` (the
    model's: :func:`~mlpmem.compute.model_device`)."""
    length = max(w.end - w.start for w in windows)
    input_ids = torch.full((len(windows), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), length), dtype=torch.long)
    for b, w in enumerate(windows):
        n = w.end - w.start
        input_ids[b, :n] = torch.from_numpy(token_docs[w.doc][w.start : w.end].astype(np.int64))
        mask[b, :n] = 1
    return input_ids.to(device), mask.to(device)


def _scored_states(model, token_docs, windows: Sequence[Window], layer: int, site: str,
                   with_lm: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Keys ``(M, d)`` and, with ``with_lm``, final hidden states ``(M, d)`` at the scored positions, window by
    window (in the running precision)."""
    input_ids, mask = pad_windows(token_docs, windows, device=model_device(model))  # (B, T)
    rows = torch.cat([torch.full((w.num_scored,), b) for b, w in enumerate(windows)]).to(input_ids.device)  # (M,)
    cols = torch.cat([torch.arange(w.positions.start, w.positions.stop) for w in windows]).to(input_ids.device)
    if not with_lm:
        return extract_keys(model, input_ids, mask, layer=layer, site=site)[rows, cols], None
    with KeyHook(model, layer, site) as hook:
        hidden = base_model(model)(input_ids=input_ids, attention_mask=mask, use_cache=False)[0]  # (B, T, d)
    return hook.keys[rows, cols], hidden[rows, cols]


@torch.no_grad()
def encode_windows(model, token_docs, windows: list[Window], layer: int, site: str, with_lm: bool,
                   precision: str = "fp32") -> EncodedBatch:
    """Keys (and optionally LM log-probs) of the scored targets of a batch of windows, one right-padded window per
    row. The decoder runs at ``precision``; the LM head runs in fp32 on the scored positions only."""
    with autocast(model, precision):
        keys, hidden = _scored_states(model, token_docs, windows, layer, site, with_lm)  # (M, d)
    keys_out = keys.to(torch.float16).cpu().numpy()
    if not np.isfinite(keys_out).all():
        raise CorruptArtifact("the backbone produced NaN/Inf keys (or keys beyond fp16 range) at this layer")
    values = np.concatenate([token_docs[w.doc][w.first_target : w.end] for w in windows]).astype(np.int32)
    lm_logprob = None
    if with_lm:
        logits = output_logits(model, hidden)  # (M, V) fp32
        targets = torch.from_numpy(values).long().to(logits.device)
        lm = logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)  # (M,)
        lm_logprob = lm.float().cpu().numpy()
    return EncodedBatch(keys_out, values, lm_logprob)


def keystore_settings(config: KeystoreConfig, model, tokenizer, token_docs: Sequence[np.ndarray]) -> dict:
    """What a keystore built now from ``config`` records (and a resumed or reused one must have recorded): the
    config as it runs on ``model`` (layer index, precision), the backbone, the corpus."""
    return {
        "format": FORMAT,
        "backbone": fingerprint(model, tokenizer),
        "layer": resolve_layer(model, config.layer),
        "site": config.site,
        "block_size": config.block_size,
        "stride": config.stride,
        "batch_size": config.batch_size,
        "batches_per_shard": config.batches_per_shard,
        "with_lm": config.with_lm,
        "precision": resolve_precision(config.precision, model_device(model)),  # the manifest names what ran
        "corpus_sha": corpus_hash(token_docs),
    }


def build_keystore(config: KeystoreConfig, model, tokenizer, token_docs: Sequence[np.ndarray], out_dir: str | Path,
                   *, rebuild: bool = False, progress: bool = True, desc: str = "keys", dist: Dist | None = None
                   ) -> dict:
    """Encode every scored target of ``token_docs`` into a keystore at ``out_dir``; resumable, idempotent.

    Shard s always holds windows ``[s * P, (s + 1) * P)`` with ``P = batch_size * batches_per_shard``, so
    its bytes do not depend on which process builds it: under ``accelerate launch``/``torchrun`` each process
    encodes a contiguous slice of the pending shards and process 0 merges the records in corpus order. Shards
    already in ``out_dir`` with their records (a killed build's, or another store's linked in by
    :func:`mlpmem.pipeline.reuse.take_key_shards`) are kept.
    """
    dist = dist or current()
    out_dir = Path(out_dir)
    _check_context(model, config.block_size)
    settings = keystore_settings(config, model, tokenizer, token_docs)
    windows = make_windows(document_lengths(token_docs), config.block_size, config.stride)
    if not windows:
        raise MlpmemError("the corpus has no token to score (every document is shorter than 2 tokens)")
    per_shard = config.batch_size * config.batches_per_shard
    num_shards = -(-len(windows) // per_shard)
    fresh = dict(num_windows=len(windows), num_targets=windows.num_scored, rows=0, shards=[], complete=False)
    manifest = open_build(out_dir, settings, fresh, rebuild, dist, "keystore")
    if manifest["complete"]:
        return manifest
    done = done_indices(out_dir, manifest, f"keystore {out_dir}")
    dist.barrier()  # every process has seen the same finished shards before any writes a new one
    mine = my_slice([s for s in range(num_shards) if s not in done], dist)
    scored = sum(windows[s * per_shard : (s + 1) * per_shard].num_scored for s in mine)
    bar = tqdm(total=scored, desc=desc if dist.world == 1 else f"{desc} [rank {dist.rank}]", unit="tok",
               disable=not progress, dynamic_ncols=True)
    with inference_scope(model, settings["precision"]):  # each weight cast to bf16 once for the whole stage
        for s in mine:
            shard_windows = windows[s * per_shard : (s + 1) * per_shard]
            parts = []
            for b in range(0, len(shard_windows), config.batch_size):
                parts.append(encode_windows(model, token_docs, shard_windows[b : b + config.batch_size],
                                            settings["layer"], config.site, config.with_lm, settings["precision"]))
                bar.update(len(parts[-1].values))
            manifest = _write_shard(out_dir, manifest, parts, len(shard_windows), s, num_shards, dist)
            release_pages(token_docs)
    bar.close()
    return finish_build(out_dir, num_shards, dist, "keystore")


def _check_context(model, block_size: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if limit is not None and block_size > limit:
        raise ConfigError(f"corpus.block_size={block_size} exceeds the backbone's context of {limit} positions")


def _write_shard(out_dir: Path, manifest: dict, parts: list[EncodedBatch], num_windows: int, index: int,
                 num_shards: int, dist: Dist) -> dict:
    """Write shard ``index`` (files atomically, then its record)."""
    files = {
        "keys": save_array(out_dir, f"keys-{index:05d}.npy", np.concatenate([p.keys for p in parts])),
        "values": save_array(out_dir, f"values-{index:05d}.npy", np.concatenate([p.values for p in parts])),
    }
    if parts[0].lm_logprob is not None:
        files["lm"] = save_array(out_dir, f"lm-{index:05d}.npy", np.concatenate([p.lm_logprob for p in parts]))
    rows = files["values"]["shape"][0]
    if any(f["shape"][0] != rows for f in files.values()):
        lengths = {k: f["shape"][0] for k, f in files.items()}
        raise CorruptArtifact(f"shard {index}: fields of different lengths {lengths}")
    return _record_shard(out_dir, manifest, {"index": index, "windows": num_windows, "rows": rows, "files": files},
                         num_shards, dist)


def _record_shard(out_dir: Path, manifest: dict, record: dict, num_shards: int, dist: Dist) -> dict:
    """Record a finished shard; a single process also merges it at once, so the manifest always shows the
    progress."""
    write_record(out_dir, record)
    if dist.world == 1:
        manifest = merge_records(out_dir, manifest, num_shards, f"keystore {out_dir}")
    return manifest


class KeyStore:
    """Read side of a keystore: verified, memory-mapped shards; row i is datastore id i."""

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        what = f"keystore {self.path}"
        self.manifest = read_json(self.path / MANIFEST, what)
        if self.manifest.get("format") != FORMAT:
            raise CorruptArtifact(f"{what}: {MANIFEST} is not a keystore manifest")
        if not self.manifest.get("complete"):
            raise CorruptArtifact(f"{what} is incomplete (its build was interrupted): rerun the datastore stage")
        self.shards = [
            {name: load_array(self.path, entry, verify, what) for name, entry in s["files"].items()}
            for s in self.manifest["shards"]
        ]
        for i, (record, shard) in enumerate(zip(self.manifest["shards"], self.shards)):
            if any(len(a) != record["rows"] for a in shard.values()):
                raise CorruptArtifact(f"{what}: shard {i} does not hold {record['rows']} rows in every field "
                                      f"({ {k: len(a) for k, a in shard.items()} }): rebuild it")
        offsets = np.cumsum([0] + [s["rows"] for s in self.manifest["shards"]])
        self.offsets = offsets  # shard i holds rows offsets[i]:offsets[i+1]

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def hidden_size(self) -> int:
        return int(self.manifest["backbone"]["hidden_size"])

    @property
    def fingerprint(self) -> dict:
        return self.manifest["backbone"]

    def check_backbone(self, model, tokenizer) -> None:
        check_fingerprint(self.fingerprint, fingerprint(model, tokenizer), f"datastore {self.path}")

    def array(self, name: str) -> np.ndarray:
        """All shards of one field concatenated in RAM (``keys``, ``values`` or ``lm``)."""
        if name not in self.shards[0]:
            raise MlpmemError(f"keystore {self.path} has no field {name!r}")
        return np.concatenate([s[name] for s in self.shards])

    def rows(self, name: str) -> ShardedRows:
        """One field as a lazily read array of rows (bounded memory, for datastores larger than RAM)."""
        if name not in self.shards[0]:
            raise MlpmemError(f"keystore {self.path} has no field {name!r}")
        return ShardedRows([s[name] for s in self.shards])

    def iter_shards(self, name: str):
        """``(first_row, rows)`` of each shard in order, read one shard at a time."""
        yield from self.rows(name).chunks()
