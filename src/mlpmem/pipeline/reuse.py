"""Work of another run taken where it was built from the same inputs: the one way to reuse artifacts.

Taking is always the same: the files are hard-linked (copied across file systems) together with their record,
and only when that record (:mod:`mlpmem.freshness` settings) equals what this build would record. Every stage
writes through temporaries and atomic renames, never in place, so neither run can change the other's files. Two
granularities:

- whole stages, ``mlpmem run CONFIG --reuse-from RUN`` (:func:`reuse_stages`): studying a recipe (another training
  schedule, α, memory size, a longer run) on a corpus whose datastore and teacher are already built should not
  encode the corpus again. The datastore, the kNN-LM neighbour lists and the teacher of a source run are taken
  into a run folder that has built none of them, in pipeline order, each only if the source's stage record
  (:mod:`mlpmem.pipeline.records`) is current for this configuration; the first stage that is not, and every
  one after it (they read it), is built here as usual. The source's timings of the stages taken are copied with
  ``reused_from``, so that the new run's report still states what its datastore and teacher cost;
- keystore shards of nested corpora (:func:`take_key_shards`): shard ``s`` of a keystore always holds the keys of
  windows ``[s * P, (s + 1) * P)``, batched the same way, so its bytes depend only on the keystore's settings and
  on the tokens of those windows. A donor keystore built with the same settings but the corpus lends every shard
  that covers the same windows over the same tokens; its record goes beside it as a finished shard's, with
  ``reused_from``, and :func:`mlpmem.datastore.build_keystore` then encodes only the rest. ``mlpmem scale-data``
  builds its largest size first and lets each smaller size take its shards: the training splits are nested
  (each size the first tokens of the next), so every shard before the one holding the cut document comes for
  free, and the validation and test keystores whole.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlpmem import freshness
from mlpmem.corpora.documents import document_lengths, make_windows
from mlpmem.datastore import KeystoreConfig, keystore_settings
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.layout import RunLayout
from mlpmem.pipeline import records
from mlpmem.pipeline.run import Run
from mlpmem.utils.distributed import done_indices, write_record
from mlpmem.utils.io import link_or_copy
from mlpmem.utils.shards import MANIFEST, check_manifest, read_json, temporary, write_json

STAGES = ("datastore", "knnlm", "teacher")
"""The stages another run can lend, in pipeline order (the memory and its evaluation are what a new run is for)."""
FOLDERS = {"datastore": ("corpus", "tokens", "datastore", "eval"), "knnlm": ("knnlm",), "teacher": ("teacher",)}
"""The folders of each stage's artifacts (``corpus/`` only for a raw user corpus)."""
TIMINGS = {"datastore": ("keys_",), "knnlm": ("knn_search_",), "teacher": ("teacher",)}
"""Prefixes of the ``timings.json`` entries each stage writes."""


def reuse_stages(run: Run, source_dir: str | Path) -> list[str]:
    """Take the finished stages of the run folder ``source_dir`` that ``run`` would build from the same inputs;
    returns the stages taken (none when ``run`` has already built its datastore)."""
    source = RunLayout(Path(source_dir))
    if not source.record("datastore").is_file():
        raise ConfigError(f"--reuse-from {source_dir}: not a run folder with a finished datastore")
    if source.root.resolve() == run.dir.resolve():
        raise ConfigError(f"--reuse-from {source_dir} is this run's own folder")
    if records.read_record(run, "datastore") is not None:
        return []
    taken = []
    for stage in STAGES:
        record = records.read_record_at(source.record(stage), stage)
        # the teacher's inputs read the temperature of the kNN-LM results taken just before it
        if record is None or not freshness.is_current(record["built_from"], records.inputs(run, stage)):
            break
        _take(run, source, stage, record)
        taken.append(stage)
    return taken


def _take(run: Run, source: RunLayout, stage: str, record: dict) -> None:
    for folder in FOLDERS[stage]:
        if (source.root / folder).is_dir():
            if (run.dir / folder).exists():
                shutil.rmtree(run.dir / folder)  # an unfinished build of the stage (it has no record)
            shutil.copytree(source.root / folder, run.dir / folder, copy_function=link_or_copy)
    if source.timings.exists():
        for name, values in read_json(source.timings, "timings").items():
            if name.startswith(TIMINGS[stage]):
                run.record_timing(name, **{**values, "reused_from": str(source.root)})
    run.layout.record(stage).parent.mkdir(exist_ok=True)
    write_json(run.layout.record(stage), record)


EXEMPT = ("corpus_sha",)
"""Keystore settings a donor may differ in: the corpus (its shards are compared window by window instead)."""


@dataclass(frozen=True)
class KeyDonor:
    """A keystore (finished or not) and the token documents it was built from."""

    path: Path
    token_docs: Sequence[np.ndarray]


def take_key_shards(donor: KeyDonor, config: KeystoreConfig, model, tokenizer, token_docs, out_dir: Path) -> int:
    """Link into ``out_dir`` every shard of ``donor`` that the keystore of ``token_docs`` built from ``config``
    would encode byte for byte and has not built yet (before :func:`~mlpmem.datastore.build_keystore`, which
    keeps them); the rows taken: none when the donor has no manifest or was built from other settings."""
    settings, _ = keystore_settings(config, model, tokenizer, token_docs)
    try:
        manifest = read_json(Path(donor.path) / MANIFEST, f"keystore {donor.path}")
    except CorruptArtifact:
        return 0
    wanted = {k: v for k, v in settings.items() if k not in EXEMPT}
    if not freshness.is_current({k: manifest[k] for k in wanted if k in manifest}, wanted):
        return 0
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = set()
    if (out_dir / MANIFEST).is_file():  # a build started here: its shards stay, its settings must be these
        started = read_json(out_dir / MANIFEST, f"keystore {out_dir}")
        check_manifest(started, settings, f"keystore {out_dir}")
        done = done_indices(out_dir, started, f"keystore {out_dir}")
    per_shard = config.batch_size * config.batches_per_shard
    windows = make_windows(document_lengths(token_docs), config.block_size, config.stride).rows
    theirs = make_windows(document_lengths(donor.token_docs), config.block_size, config.stride).rows
    taken = 0
    for shard in manifest["shards"]:
        s = int(shard["index"])
        rows = windows[s * per_shard : (s + 1) * per_shard]
        if s not in done and len(rows) and np.array_equal(rows, theirs[s * per_shard : (s + 1) * per_shard]) \
                and _same_tokens(rows, token_docs, donor.token_docs):
            write_record(out_dir, _link_shard(donor, out_dir, shard))
            taken += shard["rows"]
    return taken


def _same_tokens(rows: np.ndarray, mine, theirs) -> bool:
    return all(np.array_equal(mine[d][a:b], theirs[d][a:b]) for d, a, b, _ in rows.tolist())


def _link_shard(donor: KeyDonor, out_dir: Path, record: dict) -> dict:
    """Put the files of the donor's shard ``record`` into ``out_dir`` (atomically); this build's record of it."""
    for entry in record["files"].values():
        source, target = Path(donor.path) / entry["name"], out_dir / entry["name"]
        tmp = temporary(target)
        link_or_copy(source, tmp)
        os.replace(tmp, target)
    return {"index": record["index"], "windows": record["windows"], "rows": record["rows"],
            "files": record["files"], "reused_from": str(donor.path)}


def encoded_rows(manifest: dict) -> int:
    """Rows of a keystore that its own build encoded (not linked from a donor)."""
    return sum(s["rows"] for s in manifest["shards"] if "reused_from" not in s)
