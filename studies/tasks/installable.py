"""Multiple-choice tasks from data that installs from the package registries (rows for :mod:`studies.tasks.writer`).

Every task is a list of rows ``{"id", "prompt", "choices", "label"}`` plus the ``delimiter`` that precedes each
choice (the PMI premise). The right choice's position is drawn from a seeded order, balanced across items, so a
method that prefers the first or the second choice scores chance.

- the **no-regression battery**: HaluEval dialogue and summarization as two-choice reading tasks (the context is in
  the prompt; the right response or summary against the hallucinated one), the word2vec analogies as cloze choices
  (one task per category; the distractors are other answers of the same category), the sentence-polarity items;
- **hallucination detection**, the HaluEval protocol: the model reads the knowledge (or document), the question
  (or dialogue) and one answer, and judges ``Yes`` (hallucinated) or ``No``; each item is shown once, with its right
  or its hallucinated answer, half of each;
- **closed-book preference**: a question alone, its right answer against the hallucinated one, scored by
  length-normalised log-likelihood (:func:`preference_spec`).

A context longer than ``max_chars`` (it would not fit the backbone's window) is a counted skip, never a silent drop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mlpmem.errors import ConfigError
from studies.sources import gensim_data, halueval

BATTERY_GROUP = "mlpmem_battery"
DETECT_GROUP = "mlpmem_halueval_detect"
PREFER_GROUP = "mlpmem_halueval_prefer"
JUDGE = ("Yes", "No")
"""The detection choices: ``Yes`` (the answer is hallucinated) is label 0."""
DETECT_QUESTION = {
    "qa": "Does the answer contain non-factual or hallucinated information?",
    "dialogue": "Does the response contain non-factual or hallucinated information?",
    "summarization": "Does the summary contain non-factual or hallucinated information?",
}


@dataclass
class TaskRows:
    """One task's rows, the delimiter before each choice, its data source and what was skipped (and why)."""

    name: str
    rows: list[dict]
    delimiter: str
    source: str
    skipped: dict[str, int] = field(default_factory=dict)


def balanced_flags(ids: list[str], seed: int, salt: str) -> dict[str, bool]:
    """A seeded half of ``ids`` flagged True, the other half False (one more False for an odd count)."""
    order = sorted(ids)
    random.Random(f"{salt}:{seed}").shuffle(order)
    return {item: k < len(order) // 2 for k, item in enumerate(order)}


def two_choice(item_id: str, prompt: str, right: str, wrong: str, right_second: bool) -> dict:
    choices = [wrong, right] if right_second else [right, wrong]
    return {"id": item_id, "prompt": prompt, "choices": choices, "label": int(right_second)}


def _fits(items: list[halueval.Item], context: str, max_chars: int, skipped: dict[str, int]) -> list[halueval.Item]:
    kept = [i for i in items if len(i[context]) <= max_chars]
    if len(kept) < len(items):
        skipped[f"{context} longer than {max_chars} characters"] = len(items) - len(kept)
    return kept


def _sample(items: list, limit: int | None, seed: int, salt: str) -> list:
    order = list(items)
    random.Random(f"{salt}:{seed}").shuffle(order)
    return order if limit is None else order[:limit]


def reading_task(task: str, limit: int | None, seed: int, max_chars: int, read=halueval.read) -> TaskRows:
    """HaluEval ``dialogue`` or ``summarization`` as a two-choice reading task."""
    data = read(task)
    skipped = {f"empty {k}": v for k, v in data.skipped.items()}
    if task == "dialogue":
        items = _fits(data.items, "knowledge", max_chars, skipped)
        prompt = lambda i: f"Knowledge: {i['knowledge']}\n{i['dialogue_history']}"  # noqa: E731
        right, wrong, delimiter = "right_response", "hallucinated_response", "\n[Assistant]: "
    elif task == "summarization":
        items = _fits(data.items, "document", max_chars, skipped)
        prompt = lambda i: f"Document: {i['document']}"  # noqa: E731
        right, wrong, delimiter = "right_summary", "hallucinated_summary", "\nSummary: "
    else:
        raise ConfigError(f"no reading task for HaluEval {task!r}: dialogue or summarization")
    items = _sample(items, limit, seed, f"halueval-{task}")
    second = balanced_flags([i.id for i in items], seed, f"halueval-{task}-order")
    rows = [two_choice(i.id, prompt(i).strip(), i[right], i[wrong], second[i.id]) for i in items]
    return TaskRows(f"mlpmem_halueval_{task}", rows, delimiter, halueval.source(task).describe(), skipped)


def detection_prompt(task: str, item: halueval.Item, hallucinated: bool) -> str:
    if task == "qa":
        answer = item["hallucinated_answer" if hallucinated else "right_answer"]
        shown = f"Knowledge: {item['knowledge']}\nQuestion: {item['question']}\nAnswer: {answer}"
    elif task == "dialogue":
        response = item["hallucinated_response" if hallucinated else "right_response"]
        shown = f"Knowledge: {item['knowledge']}\nDialogue: {item['dialogue_history'].strip()}\nResponse: {response}"
    else:
        summary = item["hallucinated_summary" if hallucinated else "right_summary"]
        shown = f"Document: {item['document']}\nSummary: {summary}"
    return f"{shown}\n{DETECT_QUESTION[task]} Answer Yes or No."


def detection_task(task: str, limit: int | None, seed: int, max_chars: int, read=halueval.read) -> TaskRows:
    """The HaluEval judgement on ``task``: half of the items shown with their hallucinated answer (label Yes)."""
    data = read(task)
    skipped = {f"empty {k}": v for k, v in data.skipped.items()}
    context = "document" if task == "summarization" else "knowledge"
    items = _sample(_fits(data.items, context, max_chars, skipped), limit, seed, f"halueval-detect-{task}")
    shown_wrong = balanced_flags([i.id for i in items], seed, f"halueval-detect-{task}-shown")
    rows = [{"id": i.id, "prompt": detection_prompt(task, i, shown_wrong[i.id]), "choices": list(JUDGE),
             "label": JUDGE.index("Yes" if shown_wrong[i.id] else "No")} for i in items]
    return TaskRows(f"mlpmem_halueval_detect_{task}", rows, "\nJudgement: ", halueval.source(task).describe(), skipped)


def preference_task(name: str, questions: list[dict], seed: int) -> TaskRows:
    """Closed-book preference on QA ``questions`` (``{"id", "question", "answers", "hallucinated"}``)."""
    missing = [q.get("id") for q in questions if not q.get("hallucinated") or not q.get("answers")]
    if missing:
        raise ConfigError(f"preference task {name}: question {missing[0]} has no answer or no hallucinated answer")
    second = balanced_flags([q["id"] for q in questions], seed, f"preference-{name}")
    rows = [two_choice(q["id"], f"Question: {q['question']}\nAnswer:", q["answers"][0], q["hallucinated"],
                       second[q["id"]]) for q in questions]
    # the answer prefix ends the prompt: acc_norm divides each choice's log-likelihood by its own length only
    return TaskRows(f"{PREFER_GROUP}_{name}", rows, " ", "the halueval_qa benchmark's questions")


def analogy_tasks(limit: int | None, seed: int, distractors: int = 3,
                  analogies=gensim_data.analogies) -> list[TaskRows]:
    """One cloze task per analogy category: ``a is to b as c is to`` d, against ``distractors`` other answers of
    the same category (never a, b, c or d itself)."""
    by_category: dict[str, list[gensim_data.Analogy]] = {}
    for item in analogies():
        by_category.setdefault(item.category, []).append(item)
    tasks = []
    for category, items in by_category.items():
        answers = sorted({i.d for i in items})
        rng = random.Random(f"analogy-{category}:{seed}")
        rows = []
        for item in _sample(items, limit, seed, f"analogy-{category}"):
            pool = [w for w in answers if w.lower() not in {item.a.lower(), item.b.lower(), item.c.lower(),
                                                           item.d.lower()}]
            if len(pool) < distractors:
                raise ConfigError(f"analogy category {category} has {len(pool)} distractors for {item.id}")
            choices = [item.d, *rng.sample(pool, distractors)]
            rng.shuffle(choices)
            rows.append({"id": item.id, "prompt": f"{item.a} is to {item.b} as {item.c} is to", "choices": choices,
                         "label": choices.index(item.d)})
        name = "mlpmem_analogy_" + category.replace("-", "_")
        tasks.append(TaskRows(name, rows, " ", f"questions-words.txt of {gensim_data.INSTALL}"))
    return tasks


def polarity_task(seed: int, polarity=gensim_data.polarity) -> TaskRows:
    """The sentence-polarity items: ``negative`` or ``positive`` after the review."""
    rows = [{"id": i.id, "prompt": f"Review: {i.sentence}", "choices": ["negative", "positive"],
             "label": ["negative", "positive"].index(i.label)} for i in _sample(polarity(), None, seed, "polarity")]
    return TaskRows("mlpmem_polarity", rows, "\nSentiment: ", f"pang_lee_polarity.cor of {gensim_data.INSTALL}")
