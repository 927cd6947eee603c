"""Datastore: (key, next token) pairs of a frozen backbone over a corpus, in memory-mapped shards.

One *keystore* per split: ``keys-NNNNN.npy`` fp16 ``[n, d]`` and ``values-NNNNN.npy`` int32 ``[n]``
(the next token), plus, for evaluation splits, ``lm-NNNNN.npy`` fp32 ``[n]``, the backbone's
log-probability of that token. The training split's keystore is the kNN datastore; its keys come
from a truncated forward (layers above the key layer never run). Row ``i`` of the concatenated
shards is datastore id ``i``. A shard holds a fixed number of windows, so a resumed build runs the very
same batches and writes byte-identical shards.

With ``pack`` (:mod:`mlpmem.corpora.packing`), windows shorter than ``block_size`` share model rows, each
attending only to itself with its own positions: the rows, their order and their count are those of one window
per row, and the keys equal within floating-point rounding (a different matrix shape sums in another order),
while a corpus of short documents runs full rows. The manifest records whether a store was packed, and a store
is never resumed or reused the other way.

What a keystore is built from is a :class:`KeystoreConfig` (the pipeline makes it from its ``backbone:``,
``corpus:`` and ``datastore:`` sections, :func:`mlpmem.pipeline.datastore.keystore_config`); the manifest records
it, with the backbone's fingerprint and the corpus checksum, as :mod:`mlpmem.freshness` settings.
"""

from __future__ import annotations

import warnings
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
    document_mask,
    extract_keys,
    fingerprint,
    output_logits,
    packing_unsupported,
    resolve_layer,
)
from mlpmem.compute import autocast, check_precision, inference_scope, model_device, resolve_precision
from mlpmem.config import Config
from mlpmem.corpora.documents import (
    Window,
    Windows,
    corpus_hash,
    document_lengths,
    make_windows,
    release_pages,
)
from mlpmem.corpora.packing import Layout, batch_bounds, pack_layout, packed_rows, scored_index, window_lengths
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
    """Rows per forward: windows, or with ``pack`` rows of ``block_size`` tokens."""
    batches_per_shard: int = 16
    with_lm: bool = False
    """Also store the backbone's log-probability of each target (the evaluation splits)."""
    precision: str = "fp32"
    """The decoder's precision (``auto`` is resolved on the model's device before it is recorded)."""
    pack: bool = False
    """Pack windows shorter than ``block_size`` into shared rows (:mod:`mlpmem.corpora.packing`)."""

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


def _model_inputs(model, token_docs, windows: Sequence[Window], layout: Layout, packed: bool) -> dict:
    """Keyword inputs of the decoder stack: right-padded rows with a 2-D mask, or packed rows with a 4-D
    document mask and restarting position ids."""
    if not packed:
        input_ids, mask = pad_windows(token_docs, windows)  # (B, T)
        return {"input_ids": input_ids, "attention_mask": mask}
    rows = packed_rows(token_docs, windows, layout)
    return {"input_ids": torch.from_numpy(rows.input_ids),  # (R, T)
            "attention_mask": document_mask(model, torch.from_numpy(rows.segments)),  # (R, 1, T, T)
            "position_ids": torch.from_numpy(rows.position_ids)}  # (R, T)


def _scored_states(model, token_docs, windows: Sequence[Window], layer: int, site: str, with_lm: bool,
                   pack_into: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Keys ``(M, d)`` and, with ``with_lm``, final hidden states ``(M, d)`` at the scored positions, window by
    window (in the running precision)."""
    layout = pack_layout(window_lengths(windows), pack_into)
    device = model_device(model)
    inputs = _model_inputs(model, token_docs, windows, layout, pack_into is not None)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    rows, cols = (torch.from_numpy(a).to(device) for a in scored_index(windows, layout))  # (M,) each
    if not with_lm:
        return extract_keys(model, layer=layer, site=site, **inputs)[rows, cols], None
    with KeyHook(model, layer, site) as hook:
        hidden = base_model(model)(**inputs, use_cache=False)[0]  # (R, T, d)
    return hook.keys[rows, cols], hidden[rows, cols]


@torch.no_grad()
def encode_windows(model, token_docs, windows: list[Window], layer: int, site: str, with_lm: bool,
                   precision: str = "fp32", pack_into: int | None = None) -> EncodedBatch:
    """Keys (and optionally LM log-probs) of the scored targets of a batch of windows.

    ``pack_into=None`` runs one right-padded window per row; a token count packs consecutive windows into rows of
    at most that many tokens (check :func:`packing_check` first). The rows come out in window order either way.
    The decoder runs at ``precision``; the LM head runs in fp32 on the scored positions only.
    """
    with autocast(model, precision):
        keys, hidden = _scored_states(model, token_docs, windows, layer, site, with_lm, pack_into)  # (M, d)
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


PROBE_TOLERANCE = 1e-4
"""Largest relative difference (fp32) of packed vs separate keys in :func:`packing_check`: fp32 rounding stays
orders of magnitude below it, a document that sees another one's tokens (or misses its positions) far above."""


@torch.no_grad()
def packing_check(model, layer: int, site: str) -> str | None:
    """Why packed rows would not give ``model`` its own keys, or None when they do.

    The static check of :func:`~mlpmem.backbone.packing_unsupported`, then a probe on the model itself: two
    short documents packed in one row (fp32) must get the keys each gets alone; a model that ignores the 4-D
    mask or the position ids fails it.
    """
    reason = packing_unsupported(model)
    if reason is not None:
        return reason
    vocab = model.get_input_embeddings().weight.shape[0]
    docs = [np.arange(1, 8) % vocab, np.arange(8, 13) % vocab]
    windows = [Window(0, 0, 7, 1), Window(1, 0, 5, 1)]
    alone = _scored_states(model, docs, windows, layer, site, False, None)[0]  # (M, d)
    try:
        packed = _scored_states(model, docs, windows, layer, site, False, 12)[0]
    except Exception as exc:  # noqa: BLE001 - any failure of the packed forward means: do not pack
        first = (str(exc).splitlines() or [""])[0]
        return f"a packed forward of {type(model).__name__} fails ({type(exc).__name__}: {first})"
    error = ((packed - alone).norm() / alone.norm()).item()
    if not error <= PROBE_TOLERANCE:
        return f"{type(model).__name__} does not keep packed documents apart (relative key difference {error:.1e})"
    return None


def keystore_settings(config: KeystoreConfig, model, tokenizer,
                      token_docs: Sequence[np.ndarray]) -> tuple[dict, str | None]:
    """What a keystore built now from ``config`` records (and a resumed or reused one must have recorded): the
    config as it runs on ``model`` (layer index, precision, whether it packs), the backbone, the corpus; and why
    it does not pack although ``config.pack`` asks it to (None when it packs or was not asked to)."""
    pack_into, fallback = _pack_into(model, config) if config.pack else (None, None)
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
        "pack": pack_into is not None,
        "corpus_sha": corpus_hash(token_docs),
    }, fallback


def build_keystore(config: KeystoreConfig, model, tokenizer, token_docs: Sequence[np.ndarray], out_dir: str | Path,
                   *, rebuild: bool = False, progress: bool = True, desc: str = "keys", dist: Dist | None = None
                   ) -> dict:
    """Encode every scored target of ``token_docs`` into a keystore at ``out_dir``; resumable, idempotent.

    Shard s always holds windows ``[s * P, (s + 1) * P)`` with ``P = batch_size * batches_per_shard``, so
    its bytes do not depend on which process builds it: under ``accelerate launch``/``torchrun`` each process
    encodes a contiguous slice of the pending shards and process 0 merges the records in corpus order.
    With ``pack`` a batch is up to ``batch_size`` rows of ``block_size`` tokens that share out, first-fit, as many
    consecutive windows of the shard as fit (a backbone that cannot run packed rows falls back to one window per
    row, with a warning); the manifest records which way the store was built. Shards already in ``out_dir`` with
    their records (a killed build's, or another store's linked in by :func:`mlpmem.pipeline.reuse.take_key_shards`)
    are kept.
    """
    dist = dist or current()
    out_dir = Path(out_dir)
    _check_context(model, config.block_size)
    settings, fallback = keystore_settings(config, model, tokenizer, token_docs)
    pack_into = config.block_size if settings["pack"] else None
    windows = make_windows(document_lengths(token_docs), config.block_size, config.stride)
    if not windows:
        raise MlpmemError("the corpus has no token to score (every document is shorter than 2 tokens)")
    per_shard = config.batch_size * config.batches_per_shard
    num_shards = -(-len(windows) // per_shard)
    fresh = dict(num_windows=len(windows), num_targets=windows.num_scored, rows=0, shards=[],
                 complete=False, pack_fallback=fallback)
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
            for batch in window_batches(shard_windows, config.batch_size, pack_into):
                parts.append(encode_windows(model, token_docs, batch, settings["layer"], config.site, config.with_lm,
                                            settings["precision"], pack_into))
                bar.update(len(parts[-1].values))
            manifest = _write_shard(out_dir, manifest, parts, len(shard_windows), s, num_shards, dist)
            release_pages(token_docs)
    bar.close()
    return finish_build(out_dir, num_shards, dist, "keystore")


def window_batches(windows: Windows, batch_size: int, pack_into: int | None) -> list[Windows]:
    """Consecutive batches of ``windows``: ``batch_size`` windows each, or with ``pack_into`` as many as fill
    ``batch_size`` packed rows."""
    return [windows[b] for b in batch_bounds(window_lengths(windows), batch_size, pack_into)]


def _pack_into(model, config: KeystoreConfig) -> tuple[int | None, str | None]:
    """``(block_size, None)`` when ``model`` runs packed rows, else ``(None, why not)`` with a warning."""
    reason = packing_check(model, resolve_layer(model, config.layer), config.site)
    if reason is None:
        return config.block_size, None
    warnings.warn(f"datastore: one window per row ({reason})", stacklevel=4)
    return None, reason


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
