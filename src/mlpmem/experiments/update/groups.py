"""Part of ``mlpmem update-study``: the synthetic facts' entities split into the study's groups, their documents
and their questions."""

from __future__ import annotations

import random
from pathlib import Path

from mlpmem.utils.io import write_jsonl


def entity_groups(bench, cfg) -> dict[str, list[str]]:
    """Entity ids of each group: old (first run), arriving, forgotten (among old), kept (the rest), held out; ``cfg``
    (the study's config) gives the arriving and forgotten fractions and the seed."""
    rng = random.Random(f"update-study:{cfg.seed}")
    trained = list(bench.trained)
    arriving = sorted(rng.sample(trained, max(1, round(cfg.arriving_fraction * len(trained)))))
    old = [e for e in trained if e not in set(arriving)]
    forgotten = sorted(rng.sample(old, max(1, round(cfg.forget_fraction * len(old)))))
    kept = sorted(set(trained) - set(forgotten))
    return {"old": old, "arriving": arriving, "forgotten": forgotten, "kept": kept, "held_out": list(bench.held_out)}


def entity_of(doc: dict) -> str:
    """The entity a document or explained source (``<entity>:<n>``) belongs to."""
    return doc["id"].split(":")[0]


def write_corpus(bench, entities: set[str], folder: Path) -> Path:
    """train/validation/test JSONL of ``entities``' documents (validation/test: their unseen templates)."""
    for split in ("train", "validation", "test"):
        write_jsonl(folder / f"{split}.jsonl", [d for d in bench.documents[split] if entity_of(d) in entities])
    return folder


def questions_of(bench, entities: list[str], cap: int) -> list[dict]:
    """The first ``cap`` questions about ``entities`` (validation, test, then held-out questions)."""
    wanted = set(entities)
    rows = [q for split in ("validation", "test", "held_out") for q in bench.questions[split] if q["entity"] in wanted]
    return rows[:cap]
