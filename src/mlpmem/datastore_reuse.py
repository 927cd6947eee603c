"""Shards of another keystore reused where their inputs are the same (nested corpora).

Shard ``s`` of a keystore always holds the keys of windows ``[s * P, (s + 1) * P)`` (``P`` windows a shard), batched
the same way, so its bytes depend only on the build settings (backbone, layer, site, windows, batching, precision)
and on the tokens of those windows. When another keystore (the *donor*) was built with the same settings and its
shard ``s`` covers the same windows over the same tokens, its files are this shard's files: they are hard-linked
(copied across file systems) instead of encoded, and the shard's record says where it came from.

``python -m studies scale-data`` builds its largest size first and lets each smaller size reuse its shards: the training
splits are nested (each size the first tokens of the next), so every shard before the one holding the cut
document comes for free, and the validation and test keystores whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem.corpora.documents import Windows, document_lengths, make_windows
from mlpmem.errors import CorruptArtifact
from mlpmem.utils.io import link_or_copy
from mlpmem.utils.shards import MANIFEST, read_json, temporary

EXEMPT = ("corpus_sha",)
"""Build settings a donor may differ in: the corpus (its shards are compared window by window instead)."""


@dataclass(frozen=True)
class KeyDonor:
    """A keystore (finished or not) and the token documents it was built from."""

    path: Path
    token_docs: Sequence[np.ndarray]


def donor_shards(donor: KeyDonor, settings: dict, windows: Windows, token_docs, per_shard: int) -> dict[int, dict]:
    """``{index: donor's shard record}`` of the shards this build may take from ``donor``: same settings but the
    corpus, the same windows at the same index, the same tokens in each window. Empty when the donor has no
    manifest or was built otherwise."""
    try:
        manifest = read_json(Path(donor.path) / MANIFEST, f"keystore {donor.path}")
    except CorruptArtifact:
        return {}
    if any(manifest.get(key) != value for key, value in settings.items() if key not in EXEMPT):
        return {}
    theirs = make_windows(document_lengths(donor.token_docs), settings["block_size"], settings["stride"]).rows
    reusable = {}
    for record in manifest["shards"]:
        s = int(record["index"])
        mine = windows.rows[s * per_shard : (s + 1) * per_shard]
        if len(mine) and np.array_equal(mine, theirs[s * per_shard : (s + 1) * per_shard]) \
                and _same_tokens(mine, token_docs, donor.token_docs):
            reusable[s] = record
    return reusable


def _same_tokens(rows: np.ndarray, mine, theirs) -> bool:
    return all(np.array_equal(mine[d][a:b], theirs[d][a:b]) for d, a, b, _ in rows.tolist())


def link_shard(donor: KeyDonor, out_dir: Path, record: dict) -> dict:
    """Put the files of the donor's shard ``record`` into ``out_dir`` (hard links, else copies; atomically);
    this build's record of the shard."""
    for entry in record["files"].values():
        source, target = Path(donor.path) / entry["name"], Path(out_dir) / entry["name"]
        tmp = temporary(target)
        link_or_copy(source, tmp)
        os.replace(tmp, target)
    return {"index": record["index"], "windows": record["windows"], "rows": record["rows"],
            "files": record["files"], "reused_from": str(donor.path)}


def encoded_rows(manifest: dict) -> int:
    """Rows of a keystore that its own build encoded (not linked from a donor)."""
    return sum(s["rows"] for s in manifest["shards"] if "reused_from" not in s)
