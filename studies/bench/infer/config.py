"""Options of ``python -m studies bench infer`` and the names of the methods it times."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from studies.bench.knn_setup import KnnSetupConfig

TIMED_METHODS = ("backbone", "memory", "knnlm", "rag", "knnlm-exact", "memory-gate")
"""``rag`` is the registry's ``rag-<rag_retriever>``; ``knnlm`` and ``knnlm-exact`` are its ``knnlm`` over the
benchmark's large datastore, searched by the IVF-PQ index or exactly; ``memory-gate`` the memory mixed by the
run's learned gate (``mlpmem gate``)."""
DEFAULT_METHODS = TIMED_METHODS[:4]
BATCH1_ONLY = ("knnlm-exact",)  # brute force over every key per step: timed at batch 1 only
KNN_KEYS = ("bench", "run")
FALLBACK_LAMBDA = {"memory": 0.3, "knnlm": 0.2}  # timed instead of a chosen λ = 0, which skips the method


@dataclass
class InferBenchConfig(Config):
    overrides: list[str] = field(default_factory=list)
    """``KEY=VALUE`` overrides of the measured run's config (``--set``), e.g. another ``run_dir``."""
    prompt_tokens: int = 256
    new_tokens: int = 32
    batch_sizes: list[int] = field(default_factory=lambda: [1, 4])
    repeats: int = 5
    warmup: int = 1
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    """Any of backbone, memory, knnlm, rag and knnlm-exact (kNN-LM with brute-force search, as the pipeline's
    perplexity evaluation uses; reads every key per step)."""
    ladder: bool = True
    """Also time the memory without each optimization (batch 1 only)."""
    threads: int | None = None
    rag_retriever: str = "dense"
    """``dense`` (all-MiniLM-L6-v2) or ``bm25`` (see baselines.rag)."""
    rag_top_k: int = 3
    rag_context_tokens: int = 512
    """RAG prompt limit = prompt_tokens + this (the passages fill it)."""
    out_dir: str = "runs/bench/infer"
    lam: float | None = None
    """λ of the memory; None: the run's, or ``FALLBACK_LAMBDA`` if the run chose 0 (the memory would not run)."""
    knn: KnnSetupConfig = field(default_factory=KnnSetupConfig)
    knn_keys: str = "bench"
    """The kNN-LM's keys: ``bench``, the measured run's own keystores (datastore and validation) with those of
    ``knn.sources`` that exist, topped up to ``knn.min_keys`` (``knn_setup``); ``run``, the run's datastore alone
    (the kNN-LM that run would deploy; its IVF-PQ index cached in ``knn.index_dir``)."""

    def validate(self) -> None:
        if isinstance(self.knn, dict):
            self.knn = KnnSetupConfig(**self.knn)
        bad = set(self.methods) - set(TIMED_METHODS)
        if bad or "backbone" not in self.methods:
            raise ConfigError(f"bench methods must include backbone and be among {TIMED_METHODS}, got {self.methods}")
        if self.prompt_tokens < 1 or self.new_tokens < 2 or self.repeats < 1 or self.warmup < 0:
            raise ConfigError("bench prompt_tokens >= 1, new_tokens >= 2, repeats >= 1 and warmup >= 0 needed")
        if self.knn_keys not in KNN_KEYS:
            raise ConfigError(f"bench knn_keys must be one of {KNN_KEYS}, got {self.knn_keys!r}")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError("bench batch_sizes must hold integers >= 1")
