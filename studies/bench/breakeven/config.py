"""Options of ``python -m studies bench breakeven`` (typed, checked on construction)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlpmem.config import Config
from mlpmem.errors import ConfigError

FINETUNED = ("cpt", "lora")
"""The fine-tuned baselines whose training time can be measured beside the others (``finetune``)."""


@dataclass
class BreakEvenConfig(Config):
    sizes: list[int] = field(default_factory=lambda: [40_000, 200_000, 1_400_000])
    """Training-split caps in corpus tokens, one run each (whole documents in order, the last one cut)."""
    overrides: list[str] = field(default_factory=list)
    """``KEY=VALUE`` overrides of the config (``--set``), applied to every size."""
    out_dir: str = "runs/bench/breakeven"
    """Work folder: ``tokens-<N>/run`` (the pipeline run of size N), ``tokens-<N>/costs.json`` (what was measured,
    so a rerun resumes), ``tokens-<N>/infer`` and ``tokens-<N>/knn-index``; the report too unless ``docs_dir``."""
    docs_dir: str | None = None
    """Where ``report.md``, ``results.json`` and ``breakeven.png`` go (None: ``out_dir``), e.g.
    docs/results/breakeven."""
    prompt_tokens: int = 256
    """P: the prompt of one request (test-split windows)."""
    new_tokens: int = 32
    """N: the tokens one request generates."""
    serving_batch: int = 4
    """A second batch size, for the cost per request when requests are served together (1: batch 1 only)."""
    repeats: int = 5
    warmup: int = 1
    rag_retriever: str = "dense"
    ivfpq_min_keys: int = 10_000
    """kNN-LM is also timed with an IVF-PQ index (FAISS: ``pq_bytes``-byte codes, lists sized to the datastore)
    from this many keys on; below, exact search only (PQ training wants 39 × 256 keys)."""
    pq_bytes: int = 64
    nprobe: int = 32
    finetune: list[str] = field(default_factory=lambda: list(FINETUNED))
    """Also train these fine-tuned baselines on each size's corpus, for their offline time ([]: none)."""
    search_keys: list[int] = field(default_factory=list)
    """kNN-LM's decode also timed on the largest size's run over this many keys each, its datastore topped up with
    synthetic keys (:mod:`.search_scale`; search cost only), e.g. 10M: []: none."""
    threads: int | None = None

    def validate(self) -> None:
        if len(self.sizes) < 1 or min(self.sizes) < 2 or len(set(self.sizes)) != len(self.sizes):
            raise ConfigError(f"breakeven sizes must be distinct token counts >= 2, got {self.sizes}")
        if self.prompt_tokens < 1 or self.new_tokens < 2 or self.serving_batch < 1:
            raise ConfigError("breakeven needs prompt_tokens >= 1, new_tokens >= 2 and serving_batch >= 1")
        if self.repeats < 1 or self.warmup < 0:
            raise ConfigError("breakeven needs repeats >= 1 and warmup >= 0")
        if self.rag_retriever not in ("dense", "bm25"):
            raise ConfigError(f"breakeven rag_retriever must be dense or bm25, got {self.rag_retriever!r}")
        if self.ivfpq_min_keys < 1 or self.pq_bytes < 1 or self.nprobe < 1:
            raise ConfigError("breakeven ivfpq_min_keys, pq_bytes and nprobe must be >= 1")
        if any(n < 1 for n in self.search_keys) or len(set(self.search_keys)) != len(self.search_keys):
            raise ConfigError(f"breakeven search_keys must be distinct key counts >= 1, got {self.search_keys}")
        bad = set(self.finetune) - set(FINETUNED)
        if bad:
            raise ConfigError(f"breakeven finetune takes {FINETUNED}, got {sorted(bad)}")

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({1, self.serving_batch})
