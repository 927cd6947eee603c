"""A teacher folder distilled from trained memories (ensemble distillation, the ``seeds`` study's ``distil``
variants): every datastore position's targets are the memories' averaged distributions, mixed with the run's kNN
teacher at ``knn_weight`` (:func:`mlpmem.distil.distilled_rows`).

The folder is stored exactly like the kNN teacher (:mod:`mlpmem.teacher`; shard s covers datastore shard s, so an
interrupted build resumes shard by shard), and a memory trains on it unchanged. The memories are scored on the
training keys they were trained on, so the targets carry what they memorised too; what the average adds is the
agreement of independent fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from mlpmem.config import Config
from mlpmem.datastore import KeyStore
from mlpmem.distil import distilled_rows
from mlpmem.errors import ConfigError
from mlpmem.memory import MLPMemory
from mlpmem.teacher import FORMAT, TeacherStore, teacher_rows_at, write_shard
from mlpmem.utils.distributed import current, done_indices, finish_build, my_slice, open_build
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import MANIFEST, release, sha256_file


@dataclass
class DistilConfig(Config):
    knn_weight: float = 0.0
    """β: the kNN teacher's share of each target (0: the memories' average alone)."""
    top_k: int = 32
    """Tokens kept per position (K), as in the kNN teacher."""
    batch: int = 1024
    """Keys scored at once by each memory (bounds the (batch, V) probabilities held)."""

    def validate(self) -> None:
        if not 0.0 <= self.knn_weight <= 1.0:
            raise ConfigError(f"distil knn_weight must be in [0, 1], got {self.knn_weight}")
        if self.top_k < 1 or self.batch < 1:
            raise ConfigError("distil top_k and batch must be >= 1")


def check_members(memories: list[MLPMemory]) -> None:
    """At least one memory, all scoring the same tokens (one corpus head's ids, or the full vocabulary)."""
    if not memories:
        raise ConfigError("a distilled teacher needs at least one memory")
    ids = [None if m.vocab_ids is None else m.vocab_ids.tolist() for m in memories]
    if any(i != ids[0] for i in ids[1:]):
        raise ConfigError("the memories score different vocabularies: their distributions cannot be averaged")


def load_members(memory_dirs: list[str | Path], backbone=None) -> list[MLPMemory]:
    """The memories saved in ``memory_dirs`` (in eval mode; ``backbone`` ``(model, tokenizer)`` for a tied head),
    checked to share one head (:func:`check_members`)."""
    model, tokenizer = backbone or (None, None)
    memories = [MLPMemory.from_pretrained(d, backbone_model=model, backbone_tokenizer=tokenizer).eval()
                for d in memory_dirs]
    check_members(memories)
    return memories


def _settings(store: KeyStore, memory_dirs: list[Path], knn: TeacherStore | None, cfg: DistilConfig) -> dict:
    return {
        "format": FORMAT,
        "source": "memories",
        "datastore_manifest_sha": sha256_file(store.path / MANIFEST),
        "backbone": store.fingerprint,
        "memories": [sha256_file(Path(d) / "model.safetensors") for d in memory_dirs],
        "knn_teacher_manifest_sha": None if knn is None else sha256_file(knn.path / MANIFEST),
        "knn_weight": cfg.knn_weight,
        "top_k": cfg.top_k,
    }


def build_distilled_teacher(datastore_dir: str | Path, memory_dirs: list[str | Path], out_dir: str | Path,
                            cfg: DistilConfig, knn_teacher: str | Path | None = None, backbone=None,
                            rebuild: bool = False, progress: bool = True) -> dict:
    """Write the distilled targets of every datastore position to ``out_dir`` (a teacher folder).

    The memories saved in ``memory_dirs`` (their weights' checksums are the build's settings) are loaded only when
    something is left to build, against ``backbone`` ``(model, tokenizer)`` (needed for a tied head);
    ``knn_teacher`` is the run's kNN teacher folder, needed when ``cfg.knn_weight > 0``. Under several processes
    each scores its slice of the shards.
    """
    if not memory_dirs:
        raise ConfigError("a distilled teacher needs at least one memory")
    if cfg.knn_weight > 0 and knn_teacher is None:
        raise ConfigError("distil knn_weight > 0 needs the run's kNN teacher")
    set_threads()
    dist = current()
    store = KeyStore(datastore_dir)
    knn = None if knn_teacher is None or cfg.knn_weight == 0 else TeacherStore(knn_teacher, datastore=store)
    out_dir, num_shards = Path(out_dir), len(store.shards)
    manifest = open_build(out_dir, _settings(store, [Path(d) for d in memory_dirs], knn, cfg),
                          dict(rows=0, shards=[], complete=False, bytes_per_token=cfg.top_k * 6 + 4), rebuild, dist,
                          "distilled teacher")
    if manifest["complete"]:
        return manifest
    done = done_indices(out_dir, manifest, f"distilled teacher {out_dir}")
    memories = load_members(memory_dirs, backbone)
    pending = my_slice([s for s in range(num_shards) if s not in done], dist)
    bar = tqdm(total=sum(store.shards[s]["keys"].shape[0] for s in pending), unit="tok", disable=not progress,
               desc="distilled teacher", dynamic_ncols=True)
    for s in pending:
        manifest = write_shard(out_dir, manifest, s, list(_shard_rows(store, s, memories, knn, cfg, bar)),
                               num_shards, dist)
    bar.close()
    return finish_build(out_dir, num_shards, dist, "distilled teacher")


def _shard_rows(store: KeyStore, s: int, memories: list[MLPMemory], knn: TeacherStore | None, cfg: DistilConfig,
                bar):
    """The targets of datastore shard ``s``, batch by batch."""
    keys = store.shards[s]["keys"]
    start = int(store.offsets[s])
    for b in range(0, keys.shape[0], cfg.batch):
        rows = np.arange(start + b, start + min(b + cfg.batch, keys.shape[0]))
        knn_rows = None if knn is None else teacher_rows_at(knn, rows)
        yield distilled_rows(memories, keys[b : b + cfg.batch], knn_rows, cfg.knn_weight, cfg.top_k)
        bar.update(len(rows))
    release(keys)
