"""Stage 1, the corpus: a shipped or user corpus split by document, each split tokenized once."""

from __future__ import annotations

import contextlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlpmem.backbone import tokenizer_hash
from mlpmem.config import Config
from mlpmem.corpora.documents import (
    SPLITS,
    doc_start_token,
    iter_documents,
    split_files,
)
from mlpmem.corpora.registry import prepare
from mlpmem.corpora.tokens import TokenDocs, is_current, open_tokens, write_tokens
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.pipeline.run import Run
from mlpmem.utils.distributed import current
from mlpmem.utils.shards import read_json, temporary, write_json


@dataclass
class CorpusConfig(Config):
    name: str | None = "shakespeare-by-play"
    """A shipped corpus (see ``mlpmem corpora``), or null when ``path`` is given."""
    options: dict = field(default_factory=dict)
    """Keyword options of the shipped corpus's prepare function (e.g. ``{n_articles: 16}``)."""
    path: str | None = None
    """A prepared folder (train/validation/test.jsonl) or raw text/JSONL file or folder, split by document."""
    validation_fraction: float = 0.1
    test_fraction: float = 0.1
    block_size: int = 512
    stride: int = 256
    max_tokens: dict[str, int] = field(default_factory=dict)
    """Optional cap per split (``{train: 50000}``) for quick runs: documents are taken in order, the last cut."""

    def validate(self) -> None:
        if (self.name is None) == (self.path is None):
            raise ConfigError("corpus needs exactly one of name (a shipped corpus) or path")
        if not 0 < self.stride <= self.block_size:
            raise ConfigError(f"corpus.stride must be in (0, block_size], got {self.stride}/{self.block_size}")
        if not 0 <= self.validation_fraction < 1 or not 0 <= self.test_fraction < 1:
            raise ConfigError("corpus validation/test fractions must be in [0, 1)")
        bad = set(self.max_tokens) - {"train", "validation", "test"}
        if bad or any(v < 2 for v in self.max_tokens.values()):
            raise ConfigError("corpus.max_tokens takes train/validation/test caps >= 2")


def corpus_folder(run: Run) -> Path:
    """A folder with train/validation/test.jsonl: shipped, prepared by the user, or split here."""
    cfg = run.cfg.corpus
    if cfg.name is not None:
        return prepare(cfg.name, seed=run.cfg.seed, **cfg.options)
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise CorpusError(f"corpus.path {cfg.path} not found (a text/JSONL file or a folder of them)")
    if path.is_dir() and all((path / f"{s}.jsonl").is_file() for s in SPLITS):
        return path
    return split_by_document(path, cfg, run.layout.corpus, run.cfg.seed)


def _source_state(path: Path) -> list:
    """Name, size and modification time of every file of a corpus (what decides a split or its tokens are stale:
    cheap to read, unlike a checksum of a corpus of many GB)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def split_by_document(path: Path, cfg: CorpusConfig, out: Path, seed: int) -> Path:
    """Seeded split of whole documents into train/validation/test (at least one document in train).

    Two streaming passes (count, then write each document to its split), so the corpus is never held in RAM;
    the split is reused while the source files, fractions and seed are unchanged.
    """
    record = {"source": _source_state(Path(path)), "validation_fraction": cfg.validation_fraction,
              "test_fraction": cfg.test_fraction, "seed": seed}
    if (out / "split.json").is_file() and read_json(out / "split.json", "corpus split") == record:
        return out
    n = sum(1 for _ in iter_documents(path))
    if n == 0:
        raise CorpusError(f"corpus {path} is empty (no non-blank document)")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val, n_test = round(n * cfg.validation_fraction), round(n * cfg.test_fraction)
    if n - n_val - n_test < 1:
        raise CorpusError(f"corpus has {n} document(s): too few to split into train/validation/test")
    split_of = np.zeros(n, dtype=np.int8)  # 0 train, 1 validation, 2 test
    split_of[order[:n_val]], split_of[order[n_val : n_val + n_test]] = 1, 2
    out.mkdir(parents=True, exist_ok=True)
    tmp = {s: temporary(out / f"{s}.jsonl") for s in ("train", "validation", "test")}
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(tmp[s], "w", encoding="utf-8")) for s in ("train", "validation", "test")]
        for i, doc in enumerate(iter_documents(path)):
            files[split_of[i]].write(json.dumps({"id": doc.id, "text": doc.text}) + "\n")
    for split, file in tmp.items():
        os.replace(file, out / f"{split}.jsonl")
    write_json(out / "split.json", record)
    return out


def split_tokens(run: Run, split: str) -> TokenDocs:
    """The documents of one split as token arrays, capped by ``corpus.max_tokens`` (whole documents in order,
    the last cut). Tokenized once, streaming, into ``run_dir/tokens/<split>`` and memory-mapped from there."""
    source = split_files(corpus_folder(run))[split]
    tokenizer, cap = run.backbone[1], run.cfg.corpus.max_tokens.get(split)
    settings = {"source": _source_state(source), "tokenizer_sha": tokenizer_hash(tokenizer),
                "doc_start": doc_start_token(tokenizer), "cap": cap}
    folder, dist = run.layout.tokens(split), current()
    if dist.is_main and not is_current(folder, settings):
        write_tokens(iter_documents(source), tokenizer, folder, settings, cap, run.progress, f"tokenize {split}")
    dist.barrier()
    docs = open_tokens(folder)
    if not len(docs):
        raise CorpusError(f"the {split} split of the corpus is empty")
    block = run.cfg.corpus.block_size
    if docs.num_tokens < block:
        raise CorpusError(f"the {split} split has {docs.num_tokens} tokens, shorter than one block "
                          f"(block_size={block})")
    return docs
