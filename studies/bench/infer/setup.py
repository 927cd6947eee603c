"""What a measurement needs from a finished run: its prompts, and each method built and put in timed form.

Every method is built by :mod:`mlpmem.baselines.methods` from the run folder; this module adds what only the
benchmark does: kNN-LM over the benchmark's large datastore (:mod:`~studies.bench.knn_setup`) or the run's
own, RAG passages of the run's training split (as capped for the run) with the prompt cut to one common length,
and each method's own measurements (search and retrieval seconds).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import torch

from mlpmem.baselines.knnlm import CombinedKeyStore
from mlpmem.baselines.methods import Built, MethodOptions, build_method
from mlpmem.baselines.rag import RAGConfig, load_encoder
from mlpmem.corpora.documents import SPLITS, Document, read_documents, split_files, tokenize_documents
from mlpmem.corpora.registry import prepare
from mlpmem.corpora.tokens import open_tokens
from mlpmem.errors import ConfigError
from mlpmem.inference.hooks import BackboneWrapper
from mlpmem.layout import RunLayout
from studies.bench.infer.config import InferBenchConfig
from studies.bench.infer.measure import TimedMethod
from studies.bench.knn_setup import knn_datastore, knn_index


def split_documents(cfg, split: str) -> list[dict]:
    """Documents of one split of a run's corpus: shipped, a prepared folder, or the run's own split."""
    if cfg.corpus.name is not None:
        folder = prepare(cfg.corpus.name, seed=cfg.seed, **cfg.corpus.options)
    elif all((Path(cfg.corpus.path) / f"{s}.jsonl").is_file() for s in SPLITS):
        folder = Path(cfg.corpus.path)
    else:
        folder = Path(cfg.run_dir) / "corpus"  # split by the pipeline from a raw corpus
    return [{"id": d.id, "text": d.text} for d in read_documents(split_files(folder)[split])]


def train_documents(cfg, tokenizer) -> list[dict]:
    """The training documents the run's memory saw: its split, or under ``corpus.max_tokens.train`` the run's
    capped token documents decoded back to text (RAG then indexes the same corpus as the memory)."""
    if cfg.corpus.max_tokens.get("train") is None:
        return split_documents(cfg, "train")
    folder = RunLayout(Path(cfg.run_dir)).tokens("train")
    if not (folder / "manifest.json").is_file():
        raise ConfigError(f"the run's capped training split {folder} is not built: run the run's datastore stage "
                          "(`mlpmem datastore CONFIG`) first")
    docs = open_tokens(folder, verify=False)
    return [{"id": str(i), "text": tokenizer.decode(docs[i][1:].tolist())} for i in range(len(docs))]


def encoder_parameters(rag) -> int | None:
    """Parameters of the dense retriever's sentence encoder (None for BM25 or an encoder that is no module)."""
    encoder = getattr(rag.retriever, "encoder", None)
    return sum(p.numel() for p in encoder.parameters()) if isinstance(encoder, torch.nn.Module) else None


def prompt_windows(docs: list[dict], tokenizer, length: int, count: int) -> torch.Tensor:
    """``count`` disjoint windows of ``length`` tokens from the documents, in order: (count, length)."""
    tokens = tokenize_documents([Document(d["id"], d["text"]) for d in docs], tokenizer)
    flat = np.concatenate([t[1:] for t in tokens])  # without document-start tokens
    if len(flat) < length * count:
        raise ConfigError(f"the test split has {len(flat)} tokens, fewer than {count} prompts of {length}")
    return torch.from_numpy(flat[: length * count].astype(np.int64)).view(count, length)


def timed(name: str, built: Built) -> TimedMethod:
    """A built method on the shared backbone: a wrapper's hooks installed around the backbone's forward."""
    model = built.model
    return TimedMethod(name, context=model.active if isinstance(model, BackboneWrapper) else contextlib.nullcontext)


def rag_method(cfg: InferBenchConfig, run_cfg, backbone: tuple) -> tuple[TimedMethod, dict]:
    """RAG over the run's training split; retrieval and the longer prompt are timed as part of TTFT."""
    tokenizer = backbone[1]
    rag_cfg = RAGConfig(retriever=cfg.rag_retriever, top_k=cfg.rag_top_k,
                        max_prompt_tokens=cfg.prompt_tokens + cfg.rag_context_tokens)
    encoder = load_encoder() if cfg.rag_retriever == "dense" else None  # loading it is no part of the indexing
    docs = train_documents(run_cfg, tokenizer)
    t0 = time.perf_counter()
    built = build_method(f"rag-{cfg.rag_retriever}", Path(run_cfg.run_dir), backbone,
                         MethodOptions(docs=docs, rag=rag_cfg, encoder=encoder))
    rag = built.rag
    info = {"passages": len(rag.retriever.passages), "index_seconds": time.perf_counter() - t0,
            "retriever": rag_cfg.retriever, "top_k": rag_cfg.top_k, "max_prompt_tokens": rag_cfg.max_prompt_tokens,
            "text_bytes": sum(len(p.encode()) for p in rag.retriever.passages),
            "embedding_bytes": built.cost["inference_bytes"], "encoder_parameters": encoder_parameters(rag)}

    def prepare_ids(prompt_ids: torch.Tensor) -> torch.Tensor:
        questions = [{"question": q} for q in tokenizer.batch_decode(prompt_ids)]
        prompts = built.prompts(questions)  # retrieval (dense encoder + top-k) and the prompt with the passages
        ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = min(len(i) for i in ids)  # one common length: keep each prompt's end (the question)
        return torch.tensor([i[len(i) - width :] for i in ids])

    return TimedMethod("rag", prepare=prepare_ids, extra=lambda: {"retrieval_s": rag.last_retrieval_seconds}), info


def own_keystores(run_dir: Path) -> list[str]:
    """The run's keystores the benchmark's large datastore starts from: its training datastore and validation keys."""
    return [str(run_dir / "datastore"), str(run_dir / "eval" / "validation")]


def knn_keys(cfg: InferBenchConfig, run_dir: Path, backbone: tuple, progress: bool, precision: str,
             config: str = "CONFIG") -> CombinedKeyStore:
    """The kNN-LM's keys (``cfg.knn_keys``): the run's datastore alone, or the benchmark's large datastore."""
    own = own_keystores(run_dir)
    if cfg.knn_keys == "run":
        if not (run_dir / "datastore" / "manifest.json").is_file():
            raise ConfigError(f"no kNN-LM keystore: {own[0]} is not built; run `mlpmem datastore {config}` first")
        return CombinedKeyStore(own[:1])
    return knn_datastore(*backbone, cfg.knn, progress, precision, own=own, config=config)  # at the run's precision


def knn_method(cfg: InferBenchConfig, run_dir: Path, backbone: tuple, lam: float, progress: bool,
               precision: str = "fp32", exact: bool = False, config: str = "CONFIG") -> tuple[TimedMethod, dict]:
    """kNN-LM with the run's k and T over ``knn_keys``, searched by IVF-PQ or (``exact``) brute force."""
    t0 = time.perf_counter()
    store = knn_keys(cfg, run_dir, backbone, progress, precision, config)
    index = None if exact else knn_index(store, cfg.knn, progress)  # None: exact search, (N, d) fp32 in RAM
    built = build_method("knnlm", run_dir, backbone, MethodOptions(lam=lam, knn_store=store, knn_index=index))
    decoder = built.model
    searched = {"kind": "exact"} if exact else {**vars(cfg.knn.index), "nlist": int(index.index.nlist)}  # as built
    info = {"keys": store.num_rows, "sources": [s["path"] for s in store.sources()], "setup_seconds":
            time.perf_counter() - t0, "index": searched, **built.info}
    last = {"seen": 0.0}

    def extra() -> dict:  # index.search seconds during the last measurement
        spent, last["seen"] = decoder.search_seconds - last["seen"], decoder.search_seconds
        return {"search_s": spent}

    return TimedMethod("knnlm-exact" if exact else "knnlm", context=decoder.active, extra=extra), info
