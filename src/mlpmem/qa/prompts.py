"""Zero-shot prompt templates for closed-book and retrieval-augmented QA, and the stop strings.

Closed book::

    Question: What is the birthplace of Tanoza Zuloze?
    Answer:

With retrieved passages (RAG), the passages come first, in rank order, one per paragraph::

    Context:
    <passage 1>

    <passage 2>

    Question: ...
    Answer:

The answer is decoded greedily after ``Answer:`` and cut at the first stop string.
"""

from __future__ import annotations

QUESTION_TEMPLATE = "Question: {question}\nAnswer:"
CONTEXT_HEADER = "Context:\n"
PASSAGE_SEPARATOR = "\n\n"
STOP_STRINGS = ("\n", "Question:", "Context:")


def qa_prompt(question: str, passages: list[str] | None = None) -> str:
    """The prompt for one question, with the given passages (already in rank order) as context."""
    body = QUESTION_TEMPLATE.format(question=question.strip())
    if not passages:
        return body
    return CONTEXT_HEADER + PASSAGE_SEPARATOR.join(p.strip() for p in passages) + PASSAGE_SEPARATOR + body


def cut_at_stop(text: str, stops: tuple[str, ...] = STOP_STRINGS) -> str:
    """``text`` up to the first stop string, stripped (leading whitespace, newlines included, is skipped first)."""
    text = text.lstrip()
    cut = len(text)
    for stop in stops:
        at = text.find(stop)
        if at != -1:
            cut = min(cut, at)
    return text[:cut].strip()
