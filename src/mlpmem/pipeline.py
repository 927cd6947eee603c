"""The retrieval half of the pipeline, stage by stage, inside one run folder.

    run_dir/
      config.yaml            the resolved configuration
      corpus/                prepared splits (for raw user corpora)
      tokens/<split>/        each split tokenized once into a memory-mapped token stream
      datastore/             training keystore = the kNN datastore (keys, next tokens)
      eval/{validation,test} evaluation keystores (keys, next tokens, backbone log-probs)
      knnlm/                 neighbour lists of eval queries, the sweep, results.json
      teacher/               sparse top-K kNN targets for every datastore position
      timings.json           seconds and tokens/s of every stage

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import yaml

from mlpmem.config import CorpusConfig, PipelineConfig
from mlpmem.corpus import SPLITS, doc_start_token, iter_documents, split_files
from mlpmem.distributed import launched_rank
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.shards import read_json, write_json
from mlpmem.tokens import TokenDocs, is_current, open_tokens, write_tokens


class Run:
    """A run folder plus its configuration; lazily loads the backbone once."""

    def __init__(self, cfg: PipelineConfig, progress: bool = True):
        self.cfg, self.progress = cfg, progress
        self.dir = Path(cfg.run_dir)
        self.is_main = launched_rank() == 0  # under torchrun / accelerate launch
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            (self.dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self._backbone = None

    @property
    def backbone(self):
        if self._backbone is None:
            from mlpmem.backbone import load_backbone

            self._backbone = load_backbone(self.cfg.backbone.name)
        return self._backbone

    def path(self, *parts: str) -> Path:
        """A path inside the run folder; one that would escape it (``..``, an absolute part) is an error.

        The check is lexical, so a sub-folder that is a symbolic link (a datastore on another disk) is allowed.
        """
        path = self.dir.joinpath(*parts)
        inside = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(self.dir))  # abspath normalizes ".."
        if not inside:
            raise ConfigError(f"path {path} escapes the run folder {self.dir}")
        return path

    def record_timing(self, stage: str, **values) -> None:
        if not self.is_main:
            return
        path = self.path("timings.json")
        timings = read_json(path, "timings") if path.exists() else {}
        timings[stage] = values
        write_json(path, timings)

    def timings(self) -> dict:
        path = self.path("timings.json")
        return read_json(path, "timings") if path.exists() else {}


# ---------------------------------------------------------------------------------------------
# Corpus


def corpus_folder(run: Run) -> Path:
    """A folder with train/validation/test.jsonl: shipped, prepared by the user, or split here."""
    cfg = run.cfg.corpus
    if cfg.name is not None:
        from mlpmem.shipped_corpora import prepare

        return prepare(cfg.name, seed=run.cfg.seed, **cfg.options)
    path = Path(cfg.path)
    if path.is_dir() and all((path / f"{s}.jsonl").is_file() for s in SPLITS):
        return path
    return split_by_document(path, cfg, run.path("corpus"), run.cfg.seed)


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
    tmp = {s: out / f"{s}.jsonl.tmp" for s in ("train", "validation", "test")}
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
    from mlpmem.backbone import tokenizer_hash
    from mlpmem.distributed import current

    source = split_files(corpus_folder(run))[split]
    tokenizer, cap = run.backbone[1], run.cfg.corpus.max_tokens.get(split)
    settings = {"source": _source_state(source), "tokenizer_sha": tokenizer_hash(tokenizer),
                "doc_start": doc_start_token(tokenizer), "cap": cap}
    folder, dist = run.path("tokens", split), current()
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


# ---------------------------------------------------------------------------------------------
# Stages


def stage_datastore(run: Run, rebuild: bool = False) -> dict:
    """Keys of the training split (truncated forward) and evaluation keystores with LM log-probs."""
    from mlpmem.datastore import build_keystore
    from mlpmem.index import set_threads

    set_threads()
    cfg, (model, tokenizer) = run.cfg, run.backbone
    summary = {}
    for split, folder, with_lm in (("train", "datastore", False), ("validation", "eval/validation", True),
                                   ("test", "eval/test", True)):
        tokens = split_tokens(run, split)
        t0 = time.perf_counter()
        manifest = build_keystore(
            model, tokenizer, tokens, run.path(folder), layer=cfg.backbone.layer, site=cfg.backbone.site,
            block_size=cfg.corpus.block_size, stride=cfg.corpus.stride, batch_size=cfg.datastore.batch_size,
            batches_per_shard=cfg.datastore.batches_per_shard, with_lm=with_lm, precision=cfg.backbone.precision,
            rebuild=rebuild, progress=run.progress, desc=f"keys {split}")
        seconds = time.perf_counter() - t0
        summary[split] = {"tokens": manifest["rows"], "seconds": seconds}
        if seconds > 1:  # a reused, complete keystore is not a measurement
            run.record_timing(f"keys_{split}", tokens=manifest["rows"], seconds=seconds,
                              tokens_per_s=manifest["rows"] / seconds, with_lm=with_lm)
    return summary


def stage_knnlm(run: Run) -> dict:
    """Search eval queries once, sweep (k, T, λ) on validation, apply the best to test."""
    from mlpmem.baselines import knnlm
    from mlpmem.datastore import KeyStore
    from mlpmem.index import IndexConfig, build_index, set_threads

    set_threads()
    cfg = run.cfg.knnlm
    store = KeyStore(run.path("datastore"))
    if cfg.k_max > store.num_rows:
        raise CorpusError(f"knnlm k={cfg.k_max} is larger than the datastore ({store.num_rows} keys)")
    index = None
    splits = {}
    for split in ("validation", "test"):
        queries = KeyStore(run.path("eval", split))
        _check_same_keys(store, queries)
        t0 = time.perf_counter()
        cached = run.path("knnlm", split, "neighbours.json").exists()
        if not cached:
            index_cfg = IndexConfig(kind="exact") if cfg.exact else run.cfg.teacher.index
            index = index or build_index(store, index_cfg)
        dists, ids = knnlm.search_neighbours(index, queries, cfg.k_max, run.path("knnlm", split), cfg.query_batch,
                                             run.progress)
        if not cached:  # a reused neighbour list is not a measurement
            run.record_timing(f"knn_search_{split}", queries=queries.num_rows, seconds=time.perf_counter() - t0)
        splits[split] = knnlm.EvalSplit.load(queries, dists, ids, store.array("values"))
    rows = knnlm.sweep(splits["validation"], cfg)
    chosen = knnlm.best(rows)
    results = {
        "chosen": {k: chosen[k] for k in ("k", "temperature", "lambda")},
        "validation": {"backbone_ppl": splits["validation"].ppl(1, 1.0, 0.0), "knnlm_ppl": chosen["ppl"]},
        "test": {
            "backbone_ppl": splits["test"].ppl(1, 1.0, 0.0),
            "knnlm_ppl": splits["test"].ppl(chosen["k"], chosen["temperature"], chosen["lambda"]),
            "tokens": int(splits["test"].targets.numel()),
        },
        "datastore_tokens": store.num_rows,
        "sweep": rows,
    }
    write_json(run.path("knnlm", "results.json"), results)
    return results


def _check_same_keys(store, queries) -> None:
    from mlpmem.backbone import check_fingerprint
    from mlpmem.errors import FingerprintMismatch

    check_fingerprint(store.fingerprint, queries.fingerprint, f"evaluation keystore {queries.path}")
    for key in ("layer", "site", "block_size", "stride"):
        if store.manifest[key] != queries.manifest[key]:
            raise FingerprintMismatch(f"{queries.path} uses {key}={queries.manifest[key]}, the datastore "
                                      f"{store.manifest[key]}")


def teacher_config(run: Run):
    """The teacher configuration, with T taken from the kNN-LM sweep when so configured."""
    import dataclasses

    cfg = run.cfg.teacher
    results = run.path("knnlm", "results.json")
    if run.cfg.teacher_temperature_from_knnlm and results.exists():
        cfg = dataclasses.replace(cfg, temperature=read_json(results, "knnlm results")["chosen"]["temperature"])
    return cfg


def stage_teacher(run: Run, rebuild: bool = False) -> dict:
    from mlpmem.teacher import build_teacher

    t0 = time.perf_counter()
    manifest = build_teacher(run.path("datastore"), run.path("teacher"), teacher_config(run), rebuild=rebuild,
                             progress=run.progress)
    seconds = time.perf_counter() - t0
    if seconds > 1:
        run.record_timing("teacher", tokens=manifest["rows"], seconds=seconds, tokens_per_s=manifest["rows"] / seconds,
                          bytes_per_token=manifest["bytes_per_token"])
    return manifest


def build_memory(run: Run):
    """A fresh memory for this run's backbone, key layer/site and train config (init and head options)."""
    import torch

    from mlpmem.backbone import decoder_layers
    from mlpmem.memory import MemoryConfig, MLPMemory, init_from_backbone, tie_to_backbone

    cfg, (model, tokenizer) = run.cfg, run.backbone
    overrides = {k: v for k, v in (("num_layers", cfg.train.num_layers),
                                   ("intermediate_size", cfg.train.intermediate_size)) if v is not None}
    torch.manual_seed(cfg.train.seed)
    mcfg = MemoryConfig.from_backbone(model, cfg.train.preset, cfg.backbone.layer, cfg.backbone.site, tokenizer,
                                      tie_head=cfg.train.tie_head, **overrides)
    memory = MLPMemory(mcfg)
    if cfg.train.init == "backbone":
        # the blocks start as the backbone's MLPs just above the key layer (shifted down at the top)
        init_from_backbone(memory, model, min(mcfg.key_layer + 1, len(decoder_layers(model)) - 1))
    if cfg.train.tie_head:
        tie_to_backbone(memory, model)
    return memory


def eval_data(run: Run, split: str):
    from mlpmem.datastore import KeyStore
    from mlpmem.train import EvalData

    store = KeyStore(run.path("eval", split))
    return EvalData(store.array("keys"), store.array("values"), store.array("lm"))


def stage_train(run: Run, rebuild: bool = False, out: Path | None = None) -> dict:
    """Train the memory on the datastore keys and the sparse teacher; save it to ``out/memory``.

    ``out`` defaults to the run folder (ablations train variants into sub-folders of it).
    """
    import shutil

    from mlpmem.datastore import KeyStore
    from mlpmem.index import set_threads
    from mlpmem.teacher import TeacherStore
    from mlpmem.train import TrainData, train_memory

    set_threads()
    out = run.path(os.path.relpath(out, run.dir)) if out is not None else run.dir  # never outside the run
    if rebuild and run.is_main:
        shutil.rmtree(out / "train", ignore_errors=True)
    store = KeyStore(run.path("datastore"))
    store.check_backbone(*run.backbone)
    teacher = TeacherStore(run.path("teacher"), datastore=store)
    # rows are read from the memory-mapped shards batch by batch: memory stays bounded for any datastore size
    data = TrainData(store.rows("keys"), store.rows("values"), teacher.rows("ids"), teacher.rows("probs"),
                     teacher.rows("residual"))
    memory = build_memory(run)
    state = train_memory(memory, data, eval_data(run, "validation"), run.cfg.train, out / "train", run.progress)
    state["memory_parameters"] = memory.num_parameters()
    state["memory_trainable_parameters"] = memory.num_parameters(trainable_only=True)
    if run.is_main:
        memory.save_pretrained(out / "memory")
    if out == run.dir:
        run.record_timing("train", tokens=len(data.targets) * run.cfg.train.epochs, seconds=state["train_seconds"],
                          tokens_per_s=state["tokens_per_s"])
    return state


def run_pipeline(run: Run, rebuild: bool = False) -> dict:
    """corpus -> datastore -> kNN-LM -> teacher -> memory -> evaluation and report."""
    from mlpmem.evaluate import stage_eval

    stage_datastore(run, rebuild)
    stage_knnlm(run)
    stage_teacher(run, rebuild)
    if not (run.path("memory", "config.json")).exists() or rebuild:
        stage_train(run, rebuild)
    return stage_eval(run)
