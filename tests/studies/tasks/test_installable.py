"""Rows of the installable tasks: balanced right-choice positions, counted skips, the detection labels."""

from __future__ import annotations

import pytest

from mlpmem.errors import ConfigError
from studies.sources import halueval
from studies.sources.gensim_data import Analogy, Polarity
from studies.tasks import installable


def fake_read(n: int, long_every: int = 0):
    def read(task: str) -> halueval.Items:
        items = []
        for k in range(n):
            context = "x" * (500 if long_every and k % long_every == 0 else 50)
            fields = {"qa": {"knowledge": context, "question": f"q{k}?", "right_answer": f"r{k}",
                             "hallucinated_answer": f"h{k}"},
                      "dialogue": {"knowledge": context, "dialogue_history": f"[Human]: hi {k} ",
                                   "right_response": f"r{k}", "hallucinated_response": f"h{k}"},
                      "summarization": {"document": context, "right_summary": f"r{k}",
                                        "hallucinated_summary": f"h{k}"}}[task]
            items.append(halueval.Item(f"{task}-{k + 1}", fields))
        return halueval.Items(task, items, {"right_answer": 2} if task == "qa" else {})
    return read


@pytest.mark.parametrize("task", ["dialogue", "summarization"])
def test_reading_tasks_balance_the_right_choice_and_count_long_contexts(task):
    rows = installable.reading_task(task, None, seed=0, max_chars=100, read=fake_read(40, long_every=4))
    assert rows.skipped == {f"{'knowledge' if task == 'dialogue' else 'document'} longer than 100 characters": 10}
    assert len(rows.rows) == 30 and sum(r["label"] for r in rows.rows) == 15
    for r in rows.rows:
        k = r["id"].split("-")[1]
        assert r["choices"][r["label"]] == f"r{int(k) - 1}" and r["choices"][1 - r["label"]] == f"h{int(k) - 1}"
    again = installable.reading_task(task, 10, seed=0, max_chars=100, read=fake_read(40, long_every=4))
    assert again.rows == installable.reading_task(task, 10, 0, 100, read=fake_read(40, long_every=4)).rows
    assert len(again.rows) == 10


def test_detection_shows_half_the_items_hallucinated():
    rows = installable.detection_task("qa", None, seed=1, max_chars=1000, read=fake_read(20))
    assert rows.skipped == {"empty right_answer": 2}
    yes = [r for r in rows.rows if r["choices"][r["label"]] == "Yes"]
    assert len(yes) == 10 and all(r["choices"] == ["Yes", "No"] for r in rows.rows)
    for r in rows.rows:
        k = int(r["id"].split("-")[1]) - 1
        shown = f"Answer: h{k}" if r in yes else f"Answer: r{k}"
        assert shown in r["prompt"] and r["prompt"].endswith("Answer Yes or No.")
    assert rows.delimiter == "\nJudgement: "


def test_preference_rows_and_a_question_without_hallucinated_answer():
    questions = [{"id": f"qa-{k}", "question": f"q{k}?", "answers": [f"r{k}"], "hallucinated": f"h{k}"}
                 for k in range(8)]
    task = installable.preference_task("corpus", questions, seed=0)
    assert task.name == "mlpmem_halueval_prefer_corpus" and sum(r["label"] for r in task.rows) == 4
    assert all(r["choices"][r["label"]].startswith("r") for r in task.rows)
    with pytest.raises(ConfigError, match="question qa-9 has no answer or no hallucinated answer"):
        installable.preference_task("x", [*questions, {"id": "qa-9", "question": "q", "answers": ["a"]}], 0)


def test_analogy_distractors_come_from_the_category_and_never_repeat_the_question():
    items = [Analogy(f"analogy-{k}", "capital", a, b, c, d) for k, (a, b, c, d) in enumerate([
        ("Athens", "Greece", "Baghdad", "Iraq"), ("Athens", "Greece", "Bangkok", "Thailand"),
        ("Athens", "Greece", "Beijing", "China"), ("Athens", "Greece", "Berlin", "Germany"),
        ("Berlin", "Germany", "Athens", "Greece"), ("Cairo", "Egypt", "Oslo", "Norway")])]
    (task,) = installable.analogy_tasks(None, seed=0, distractors=3, analogies=lambda: items)
    assert task.name == "mlpmem_analogy_capital" and len(task.rows) == 6
    for row, item in zip(sorted(task.rows, key=lambda r: r["id"]), sorted(items, key=lambda i: i.id)):
        assert row["choices"][row["label"]] == item.d and len(set(row["choices"])) == 4
        assert not {item.a, item.b, item.c} & set(row["choices"])
    with pytest.raises(ConfigError, match="has 2 distractors"):
        installable.analogy_tasks(None, 0, distractors=3, analogies=lambda: items[:3])


def test_polarity_rows():
    task = installable.polarity_task(0, polarity=lambda: [Polarity("p-1", "great .", "positive"),
                                                            Polarity("p-2", "dull .", "negative")])
    assert {(r["prompt"], r["choices"][r["label"]]) for r in task.rows} == {("Review: great .", "positive"),
                                                                            ("Review: dull .", "negative")}
