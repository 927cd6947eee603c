"""The data of each QA benchmark: its memory corpus and its question splits, written once under ``data/``.

``data/corpus/{train,validation,test}.jsonl`` is the corpus of the benchmark's memory run (train: the memory's
documents; validation / test: held-out text for perplexity); ``data/questions/{validation,test[,held_out]}.jsonl``
are the questions (validation questions tune λ and nothing else). ``data/meta.json`` marks a finished preparation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from memory_mosaics.experiments.bigbench import disfl_qa
from memory_mosaics.experiments.synthetic import SyntheticConfig, generate, write_benchmark
from mlpmem.utils.io import read_jsonl, write_jsonl
from studies.qa.config import BenchmarkConfig
from studies.qa.halueval_qa import prepare_halueval_qa


def prepare_synthetic(options: dict, out: Path) -> Path:
    return write_benchmark(generate(SyntheticConfig(**options)), out)


def prepare_disfl_qa(options: dict, out: Path, seed: int) -> Path:
    """Memory corpus = ``max_paragraphs`` paragraphs; two further sets of ``heldout_paragraphs`` paragraphs
    give the validation/test corpus (perplexity on unseen Wikipedia text); questions over the memory
    paragraphs are split by paragraph into validation (25 %) and test."""
    n, held = int(options.get("max_paragraphs", 100)), int(options.get("heldout_paragraphs", 20))
    paragraphs, questions = disfl_qa(max_paragraphs=n + 2 * held, seed=seed)
    rng = random.Random(f"disfl-qa-split:{seed}")
    rng.shuffle(paragraphs)
    corpus = {"train": paragraphs[:n], "validation": paragraphs[n : n + held], "test": paragraphs[n + held :]}
    for split, rows in corpus.items():
        write_jsonl(out / "corpus" / f"{split}.jsonl", rows)
    train_ids = [p["id"] for p in corpus["train"]]
    val_ids = set(rng.sample(train_ids, max(1, len(train_ids) // 4)))
    qs = {"validation": [], "test": []}
    for q in questions:
        if q["paragraph"] in set(train_ids):
            qs["validation" if q["paragraph"] in val_ids else "test"].append(q)
    for split, rows in qs.items():
        write_jsonl(out / "questions" / f"{split}.jsonl", rows)
    (out / "meta.json").write_text(json.dumps({"paragraphs": {k: len(v) for k, v in corpus.items()},
                                               "questions": {k: len(v) for k, v in qs.items()}}, indent=1))
    return out


def prepare_data(name: str, bench: BenchmarkConfig, out: Path, seed: int) -> Path:
    if (out / "meta.json").exists():
        return out
    if name == "halueval_qa":
        return prepare_halueval_qa(bench.options, out, seed)
    return prepare_synthetic(bench.options, out) if name == "synthetic" else prepare_disfl_qa(bench.options, out, seed)


def question_splits(data: Path, bench: BenchmarkConfig) -> dict[str, list[dict]]:
    out = {"validation": read_jsonl(data / "questions" / "validation.jsonl")[: bench.tune_questions],
           "test": read_jsonl(data / "questions" / "test.jsonl")[: bench.test_questions]}
    held = data / "questions" / "held_out.jsonl"
    if held.exists():
        out["held_out"] = read_jsonl(held)[: bench.test_questions]
    return out
