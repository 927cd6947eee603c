"""Part of ``python -m studies update-study``: the synthetic facts' entities split into the study's groups, their
documents and their questions."""

from __future__ import annotations

import random
from pathlib import Path

from memory_mosaics.experiments.synthetic import document
from mlpmem.inference.prompts import qa_prompt
from mlpmem.utils.io import write_jsonl

DOCUMENT = "_document"
"""Suffix of a group's name when its questions are asked in the words of a document (:func:`in_document_form`)."""
DOCUMENT_FORM = ("forgotten", "held_out")
"""The groups the study also asks in document form: is a forgotten fact gone from the documents' own positions?"""


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


def in_document_form(bench, questions: list[dict]) -> list[dict]:
    """``questions`` asked in the words of a document instead: each one's ``prompt`` is the text of the entity's
    first training document (a held-out entity's: the first template, which no document of it uses) cut before the
    answer, so that its answer position is one the memory trained on (held out: one it could have). Same ids,
    attributes and answers, so the same choices; a question whose answer the document does not hold is left out."""
    first = {}
    for doc in bench.documents["train"]:
        entity = entity_of(doc)
        if entity not in first or _template(doc) < _template(first[entity]):
            first[entity] = doc
    by_id = {e.id: e for e in bench.entities}
    out = []
    for q in questions:
        text = first[q["entity"]]["text"] if q["entity"] in first else document(by_id[q["entity"]], 0)
        cut = text.find(" " + q["answers"][0])
        if cut > 0:
            out.append({**q, "prompt": text[:cut]})
    return out


PROBE_WORDINGS = {
    "birth_city": "Where was {name} born?",
    "birth_year": "When was {name} born?",
    "employer": "Where does {name} work?",
    "field": "What field does {name} work in?",
}
"""A forget's probes: one question per attribute in a wording none of the benchmark's questions uses
(:data:`~memory_mosaics.experiments.synthetic.QUESTION_TEMPLATES`), so the scored questions stay unseen."""


def probes_of(bench, entities: list[str]) -> list[str]:
    """Probe prompts of a forget of ``entities``: each attribute asked in :data:`PROBE_WORDINGS`, in the prompt
    format the study scores in (:func:`~mlpmem.inference.prompts.qa_prompt`)."""
    by_id = {e.id: e for e in bench.entities}
    return [qa_prompt(wording.format(name=by_id[e].name)) for e in entities for wording in PROBE_WORDINGS.values()]


def _template(doc: dict) -> int:
    return int(doc["id"].rsplit(":t", 1)[1])


def questions_of(bench, entities: list[str], cap: int) -> list[dict]:
    """The first ``cap`` questions about ``entities`` (validation, test, then held-out questions)."""
    wanted = set(entities)
    rows = [q for split in ("validation", "test", "held_out") for q in bench.questions[split] if q["entity"] in wanted]
    return rows[:cap]
