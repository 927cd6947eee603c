"""Stage 2, the datastore: keys and next tokens of the training split; evaluation keystores with the
backbone's log-probs."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mlpmem.config import Config
from mlpmem.corpora.documents import SPLITS
from mlpmem.datastore import KeystoreConfig, build_keystore
from mlpmem.errors import ConfigError
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.reuse import KeyDonor, encoded_rows, take_key_shards
from mlpmem.pipeline.run import Run
from mlpmem.utils.distributed import shards_before
from mlpmem.utils.runtime import set_threads


@dataclass
class DatastoreConfig(Config):
    batch_size: int = 4
    """Rows per forward: windows, or with ``pack`` rows of ``corpus.block_size`` tokens."""
    batches_per_shard: int = 16
    pack: bool = False
    """Pack windows shorter than ``corpus.block_size`` into shared rows, each seeing only itself (same rows, order
    and keys within rounding; fewer, fuller forwards). Recorded in the keystore manifest. Off by default; for a
    corpus of short documents (the HaluEval QA preset) measure it with ``python -m studies bench packing``."""

    def validate(self) -> None:
        if self.batch_size < 1 or self.batches_per_shard < 1:
            raise ConfigError("datastore batch_size and batches_per_shard must be >= 1")


def keystore_config(cfg, with_lm: bool = False) -> KeystoreConfig:
    """The keystore settings of a pipeline config ``cfg`` (its ``backbone:``, ``corpus:`` and ``datastore:``
    sections): the run's own keys, with the backbone's log-probs when ``with_lm``."""
    return KeystoreConfig(layer=cfg.backbone.layer, site=cfg.backbone.site, block_size=cfg.corpus.block_size,
                          stride=cfg.corpus.stride, batch_size=cfg.datastore.batch_size,
                          batches_per_shard=cfg.datastore.batches_per_shard, with_lm=with_lm,
                          precision=cfg.backbone.precision, pack=cfg.datastore.pack)


def stage_datastore(run: Run, rebuild: bool = False) -> dict:
    """Keys of the training split (truncated forward) and evaluation keystores with LM log-probs; with a
    ``run.key_donor``, the shards it built from the same windows and tokens are taken, not encoded."""
    set_threads()
    model, tokenizer = run.backbone
    summary = {}
    for split in SPLITS:
        with_lm = split != "train"  # evaluation keystores also hold the backbone's log-prob of each target
        config, folder, tokens = keystore_config(run.cfg, with_lm), run.layout.keystore(split), split_tokens(run, split)
        before = encoded_rows({"shards": shards_before(folder, rebuild)})
        if run.key_donor is not None and run.is_main and not rebuild:
            donor = KeyDonor(run.key_donor.layout.keystore(split), split_tokens(run.key_donor, split))
            take_key_shards(donor, config, model, tokenizer, tokens, folder)
        t0 = time.perf_counter()
        manifest = build_keystore(config, model, tokenizer, tokens, folder, rebuild=rebuild, progress=run.progress,
                                  desc=f"keys {split}")
        seconds = time.perf_counter() - t0
        own = encoded_rows(manifest)  # the rest were linked from the donor: not a measurement
        summary[split] = {"tokens": manifest["rows"], "seconds": seconds, "reused": manifest["rows"] - own}
        run.record_build(f"keys_{split}", own, before, seconds, with_lm=with_lm)
    return summary
