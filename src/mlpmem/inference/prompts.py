"""Prompt templates for closed-book and retrieval-augmented QA, and the stop strings.

Closed book, zero-shot (the paper's setting)::

    Question: What is the birthplace of Tanoza Zuloze?
    Answer:

With retrieved passages (RAG), the passages come first, in rank order, one per paragraph::

    Context:
    <passage 1>

    <passage 2>

    Question: ...
    Answer:

With ``shots=n`` the first ``n`` of :data:`DEMONSTRATIONS` come first, one ``Question: / Answer:`` pair per
paragraph. They are general-knowledge questions about none of the benchmarks' entities and only show the
answer format: a small backbone asked zero-shot often opens a new question instead of answering (see the QA
report), so the report uses a few shots for every method alike.

The answer is decoded greedily after ``Answer:`` and cut at the first stop string.
"""

from __future__ import annotations

from mlpmem.errors import ConfigError

QUESTION_TEMPLATE = "Question: {question}\nAnswer:"
CONTEXT_HEADER = "Context:\n"
PASSAGE_SEPARATOR = "\n\n"
DEMONSTRATIONS = (
    ("What is the capital of France?", "Paris"),
    ("In which year did the Second World War end?", "1945"),
    ("Who wrote Romeo and Juliet?", "William Shakespeare"),
    ("Which company makes the iPhone?", "Apple"),
    ("What is the chemical symbol of gold?", "Au"),
    ("Which planet is closest to the Sun?", "Mercury"),
    ("What is the largest ocean on Earth?", "the Pacific Ocean"),
    ("In which country is the city of Kyoto?", "Japan"),
)


def demonstrations(shots: int) -> str:
    """The first ``shots`` demonstration pairs as a prompt prefix (empty for 0)."""
    if not 0 <= shots <= len(DEMONSTRATIONS):
        raise ConfigError(f"shots must be in [0, {len(DEMONSTRATIONS)}], got {shots}")
    return "".join(QUESTION_TEMPLATE.format(question=q) + f" {a}" + PASSAGE_SEPARATOR
                   for q, a in DEMONSTRATIONS[:shots])


def qa_prompt(question: str, passages: list[str] | None = None, shots: int = 0) -> str:
    """The prompt for one question, with the given passages (already in rank order) as context and
    ``shots`` demonstrations before everything."""
    return demonstrations(shots) + with_passages(QUESTION_TEMPLATE.format(question=question.strip()), passages)


def with_passages(body: str, passages: list[str] | None = None) -> str:
    """``body`` after the ``Context:`` block of ``passages`` (in the given order); ``body`` alone without passages.
    QA prompts put the question there; the lm-eval adapter any task's context."""
    if not passages:
        return body
    return CONTEXT_HEADER + PASSAGE_SEPARATOR.join(p.strip() for p in passages) + PASSAGE_SEPARATOR + body
