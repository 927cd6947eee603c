"""The synthetic-facts generator: deterministic under a seed, held-out entities never in any document."""

import json

import pytest

from memory_mosaics.experiments.synthetic import (
    ATTRIBUTES,
    DOC_TEMPLATES,
    QUESTION_TEMPLATES,
    SyntheticConfig,
    chance_accuracy,
    generate,
    write_benchmark,
)
from mlpmem.errors import ConfigError


def test_deterministic_under_seed(tmp_path):
    a, b = generate(SyntheticConfig(num_entities=40, seed=3)), generate(SyntheticConfig(num_entities=40, seed=3))
    assert a.documents == b.documents and a.questions == b.questions
    write_benchmark(a, tmp_path / "a")
    write_benchmark(b, tmp_path / "b")
    for f in ("corpus/train.jsonl", "questions/test.jsonl", "entities.jsonl", "meta.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    c = generate(SyntheticConfig(num_entities=40, seed=4))
    assert c.documents["train"] != a.documents["train"]


def test_held_out_entities_never_in_documents():
    bench = generate(SyntheticConfig(num_entities=60, seed=1))
    names = {e.id: e.name for e in bench.entities}
    text = " ".join(d["text"] for split in bench.documents.values() for d in split)
    assert bench.held_out and all(names[i] not in text for i in bench.held_out)
    assert all(names[i] in text for i in bench.trained)
    held = set(bench.held_out)
    assert {q["entity"] for q in bench.questions["held_out"]} == held
    assert not held & {q["entity"] for s in ("validation", "test") for q in bench.questions[s]}


def test_splits_by_entity_and_paraphrases():
    cfg = SyntheticConfig(num_entities=50, paraphrases=3, seed=0)
    bench = generate(cfg)
    assert len(bench.documents["train"]) == 3 * len(bench.trained)
    assert len(bench.documents["validation"]) == len(bench.documents["test"]) == len(bench.trained)
    val = {q["entity"] for q in bench.questions["validation"]}
    test = {q["entity"] for q in bench.questions["test"]}
    assert val and test and not val & test and val | test == set(bench.trained)
    # each trained entity's three training documents use three distinct templates
    per_entity = {}
    for d in bench.documents["train"]:
        per_entity.setdefault(d["id"].split(":")[0], set()).add(d["id"].split(":")[1])
    assert all(len(t) == 3 for t in per_entity.values())


def test_questions_phrased_unlike_documents_and_answers_in_documents():
    bench = generate(SyntheticConfig(num_entities=20, seed=0))
    doc_frames = {t.split("{")[0] for t in DOC_TEMPLATES}
    for q in bench.questions["test"]:
        assert q["attribute"] in ATTRIBUTES and len(q["answers"]) == 1
        assert not any(frame and frame in q["question"] for frame in doc_frames if len(frame) > 5)
        entity_docs = [d["text"] for d in bench.documents["train"] if d["id"].startswith(q["entity"] + ":")]
        assert all(q["answers"][0] in text for text in entity_docs)
    assert all(len(v) == 2 for v in QUESTION_TEMPLATES.values())


def test_chance_and_meta(tmp_path):
    bench = generate(SyntheticConfig(num_entities=80, seed=0))
    chance = chance_accuracy(bench)
    assert 0 < chance < 0.5
    meta = json.loads((write_benchmark(bench, tmp_path) / "meta.json").read_text())
    assert meta["held_out"] == len(bench.held_out) and meta["chance_em"]["held_out"] == chance


@pytest.mark.parametrize("bad", [{"num_entities": 2}, {"held_out_fraction": 1.0}, {"paraphrases": 9}])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        SyntheticConfig(**bad)
