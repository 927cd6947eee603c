"""The corpus end of the pipeline: streaming split of a raw corpus, tokenized splits reused from disk."""

import json

import numpy as np
import pytest

from helpers.corpus import corpus_text, write_corpus
from mlpmem.corpora import tokens
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.errors import CorpusError
from mlpmem.pipeline import corpus as pipeline_corpus
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import corpus_folder, split_tokens
from mlpmem.pipeline.run import Run


@pytest.fixture()
def run(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "corpus", 10)
    cfg = PipelineConfig.from_yaml("tiny", [f"run_dir={tmp_path / 'run'}", f"corpus.path={corpus}",
                                                         f"backbone.name={tiny_backbone_dir}"])
    return Run(cfg, progress=False)


def split_ids(folder):
    return {s: [json.loads(line)["id"] for line in (folder / f"{s}.jsonl").read_text().splitlines()]
            for s in ("train", "validation", "test")}


def test_raw_corpus_split_is_a_seeded_partition_and_is_reused(run, tmp_path):
    folder = corpus_folder(run)
    ids = split_ids(folder)
    assert sorted(sum(ids.values(), [])) == sorted(f"doc{i}" for i in range(10))
    assert (len(ids["validation"]), len(ids["test"])) == (2, 2)
    stamp = (folder / "train.jsonl").stat().st_mtime_ns
    assert corpus_folder(run) == folder and (folder / "train.jsonl").stat().st_mtime_ns == stamp  # reused
    (tmp_path / "corpus" / "doc10.txt").write_text(corpus_text(11)[10])  # the source changed: split again
    assert sorted(sum(split_ids(corpus_folder(run)).values(), [])) == sorted(f"doc{i}" for i in range(11))


def test_empty_raw_corpus(run, tmp_path):
    for p in (tmp_path / "corpus").iterdir():
        p.write_text("  \n")
    with pytest.raises(CorpusError, match="empty"):
        corpus_folder(run)


def test_split_tokens_are_memory_mapped_and_built_once(run, monkeypatch):
    docs = split_tokens(run, "train")
    texts = [json.loads(line) for line in (corpus_folder(run) / "train.jsonl").read_text().splitlines()]
    expected = tokenize_documents([Document(d["id"], d["text"]) for d in texts], run.backbone[1])
    assert isinstance(docs.tokens, np.memmap)
    assert all(np.array_equal(a, b) for a, b in zip(docs, expected)) and len(docs) == len(expected)

    def no_rebuild(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(pipeline_corpus, "write_tokens", no_rebuild)
    assert split_tokens(run, "train").num_tokens == docs.num_tokens
    run.cfg.corpus.max_tokens = {"train": 40}  # a new cap is a different split: tokenized again
    with pytest.raises(AssertionError, match="tokenized again"):
        split_tokens(run, "train")
    monkeypatch.setattr(pipeline_corpus, "write_tokens", tokens.write_tokens)
    assert split_tokens(run, "train").num_tokens == 40
