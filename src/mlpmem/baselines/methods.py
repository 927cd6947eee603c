"""The compared methods behind one interface, built from a finished pipeline run, the backbone and options.

:data:`METHODS` maps each name to a :class:`Method`; ``METHODS[name].build(run_dir, (model, tokenizer), options)``
returns a :class:`Built`: the model to generate with or to time (the backbone itself, a wrapper that mixes
kNN-LM or the memory into every forward, or a fine-tuned copy), the prompt builder, the settings the method
uses (λ, k, T; the fine-tuning record) and what it costs besides the backbone.

  - ``backbone``: the frozen backbone, closed book;
  - ``knnlm``: :class:`~mlpmem.baselines.knnlm.KnnLMDecoder` over the run's datastore (exact search) with the
    k and T of the run's perplexity sweep; another store / index can be given (the speed benchmark's);
  - ``rag-dense`` / ``rag-bm25``: the backbone with passages of ``options.docs`` retrieved into the prompt;
  - ``cpt`` / ``lora``: a copy of the backbone fine-tuned on ``options.docs`` (LoRA rank matched to the run's
    memory unless ``options.lora_params`` is given);
  - ``memory``: :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM` with the run's trained memory;
  - ``memory-gate``: the same with the run's learned gate (``mlpmem gate``, in ``run_dir/gate``): λ_t per
    position instead of one λ, so nothing is tuned.

Mixing methods (``Method.mixes``) use ``options.lam``, or the λ the run chose on validation perplexity. What is
particular to one experiment stays in it: the QA suite tunes λ on validation questions, the speed benchmark
brings its own large kNN index.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from torch import nn

from mlpmem.backbone import resolve_layer
from mlpmem.baselines.cpt import FinetuneConfig, train_cpt
from mlpmem.baselines.knnlm import KnnLMDecoder
from mlpmem.baselines.lora import LoRAConfig, train_lora
from mlpmem.baselines.rag import RAG, RAGConfig
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError
from mlpmem.index import ExactIndex
from mlpmem.inference.gate_io import load_gate
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.prompts import qa_prompt
from mlpmem.utils.io import dir_bytes
from mlpmem.utils.shards import read_json

COST_KEYS = ("trainable_parameters", "train_seconds", "inference_bytes")

PromptFn = Callable[[list[dict]], list[str]]


# ---------------------------------------------------------------------------------------------
# Prompts


def closed_book_prompts(questions: list[dict], shots: int = 0) -> list[str]:
    """QA prompts (with ``shots`` demonstrations), or the bare cloze text for cloze items
    (``"The country of X is"``)."""
    return [q["question"] if q.get("cloze") else qa_prompt(q["question"], shots=shots) for q in questions]


def prompt_builder(shots: int = 0, rag: RAG | None = None) -> PromptFn:
    """``prompt_fn(questions) -> prompts``: closed book, or through ``rag`` (retrieval + passages)."""
    if rag is not None:
        return lambda qs: rag.prompts([q["question"] for q in qs], shots)
    return lambda qs: closed_book_prompts(qs, shots)


# ---------------------------------------------------------------------------------------------
# The interface


@dataclass
class MethodOptions:
    """What a method may need besides the run folder and the backbone (each method reads its own fields)."""

    lam: float | None = None
    """Mixing weight of kNN-LM / memory; None: the λ the run chose on validation perplexity."""
    docs: list[dict] | None = None
    """The corpus ``[{"text", ...}]``: RAG's passages, CPT's and LoRA's training data."""
    shots: int = 0
    """Format demonstrations before every prompt (:mod:`mlpmem.inference.prompts`)."""
    rag: RAGConfig = field(default_factory=RAGConfig)
    """RAG settings; the retriever is the method's (dense or bm25)."""
    encoder: object = None
    """The dense retriever's sentence encoder (None: loaded by the retriever)."""
    cpt: FinetuneConfig = field(default_factory=FinetuneConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    lora_params: int | None = None
    """LoRA parameter budget; None: the run's memory's trainable parameters."""
    knn_store: object = None
    """Keys and values of kNN-LM (a KeyStore or CombinedKeyStore); None: the run's datastore."""
    knn_index: object = None
    """Index searched by kNN-LM; None: exact search over ``knn_store``'s keys."""
    progress: bool = True


@dataclass
class Built:
    """One method ready to evaluate."""

    model: nn.Module
    """What generates: the backbone, a hook wrapper around it (``.backbone``, ``.active()``, ``.lam``) or a copy."""
    prompts: PromptFn
    """``questions [{"question", ...}] -> prompt strings``."""
    info: dict
    """The settings the method uses (λ, k, T) or its fine-tuning record."""
    cost: dict
    """Beside the backbone: ``trainable_parameters``, ``train_seconds``, ``inference_bytes`` (None: not measured)."""
    rag: RAG | None = None
    """RAG's retrieval, for timing it apart from the generation."""


@dataclass(frozen=True)
class Method:
    name: str
    build: Callable[[Path | None, tuple, MethodOptions], Built]
    """``(run_dir, (model, tokenizer), options) -> Built``."""
    needs_run: bool = False
    """Reads a finished memory run folder (its memory, datastore or kNN-LM sweep)."""
    needs_docs: bool = False
    """Reads ``options.docs``."""
    mixes: bool = False
    """Mixes a second distribution into the backbone's with weight λ."""
    reads_memory: bool = False
    """Scores with the run's trained memory (they change when it is trained again)."""


def build_method(name: str, run_dir: str | Path | None, backbone: tuple, options: MethodOptions | None = None) -> Built:
    """``METHODS[name]`` built, after checking that what it reads was given."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {list(METHODS)}")
    method, options = METHODS[name], options or MethodOptions()
    if method.needs_run and run_dir is None:
        raise ConfigError(f"method {name} needs a finished memory run folder")
    if method.needs_docs and options.docs is None:
        raise ConfigError(f"method {name} needs documents")
    return method.build(None if run_dir is None else Path(run_dir), backbone, options)


# ---------------------------------------------------------------------------------------------
# What a finished run recorded


def run_results(run_dir: Path) -> dict:
    """The run's ``results.json`` (λ, the memory's parameters and bytes, perplexities)."""
    return read_json(Path(run_dir) / "results.json", "run results (run the pipeline first)")


def knnlm_chosen(run_dir: Path) -> dict:
    """``{"k", "temperature", "lambda"}`` the run's kNN-LM perplexity sweep chose."""
    return read_json(Path(run_dir) / "knnlm" / "results.json", "kNN-LM results")["chosen"]


def _stage_seconds(run_dir: Path, stage: str) -> float | None:
    path = Path(run_dir) / "timings.json"
    timings = read_json(path, "timings") if path.exists() else {}
    return timings.get(stage, {}).get("seconds")


# ---------------------------------------------------------------------------------------------
# The methods


def _backbone(run_dir, backbone, options: MethodOptions) -> Built:
    return Built(backbone[0], prompt_builder(options.shots), {},
                 {"trainable_parameters": 0, "train_seconds": 0.0, "inference_bytes": 0})


def _knnlm(run_dir, backbone, options: MethodOptions) -> Built:
    model = backbone[0]
    store = options.knn_store if options.knn_store is not None else KeyStore(run_dir / "datastore")
    index = options.knn_index if options.knn_index is not None else ExactIndex(store.array("keys"))  # (N, d)
    first = getattr(store, "stores", [store])[0]  # a CombinedKeyStore's keystores share layer and site
    chosen = knnlm_chosen(run_dir)
    lam = chosen["lambda"] if options.lam is None else options.lam
    decoder = KnnLMDecoder(model, index, np.asarray(store.array("values")),
                           resolve_layer(model, first.manifest["layer"]), first.manifest["site"], k=chosen["k"],
                           temperature=chosen["temperature"], lam=lam)
    own = options.knn_store is None
    paths = [s.path for s in getattr(store, "stores", [store])]
    cost = {"trainable_parameters": 0, "train_seconds": _stage_seconds(run_dir, "keys_train") if own else None,
            "inference_bytes": sum(dir_bytes(p) for p in paths)}
    info = {"lambda": decoder.lam, "k": chosen["k"], "temperature": chosen["temperature"]}
    return Built(decoder, prompt_builder(options.shots), info, cost)


def _rag(kind: str):
    def build(run_dir, backbone, options: MethodOptions) -> Built:
        t0 = time.perf_counter()
        rag = RAG.from_documents(options.docs, backbone[1], dataclasses.replace(options.rag, retriever=kind),
                                 options.encoder)
        cost = {"trainable_parameters": 0, "train_seconds": time.perf_counter() - t0,
                "inference_bytes": int(rag.retriever.embeddings.numel() * 4) if kind == "dense" else None,
                "inference_note": "passages + index, retrieval per question"}
        return Built(backbone[0], prompt_builder(options.shots, rag), {}, cost, rag)
    return build


def _cpt(run_dir, backbone, options: MethodOptions) -> Built:
    model = copy.deepcopy(backbone[0])
    stats = train_cpt(model, backbone[1], options.docs, options.cpt, options.progress)
    return Built(model, prompt_builder(options.shots), stats, {k: stats[k] for k in COST_KEYS})


def _lora(run_dir, backbone, options: MethodOptions) -> Built:
    target = options.lora_params
    if target is None:
        if run_dir is None:
            raise ConfigError("method lora needs a memory run (to match its parameters) or a parameter budget")
        target = run_results(run_dir)["memory_trainable_parameters"]
    model, stats = train_lora(copy.deepcopy(backbone[0]), backbone[1], options.docs, target, options.lora,
                              options.progress)
    return Built(model, prompt_builder(options.shots), stats, {k: stats[k] for k in COST_KEYS})


def _memory(run_dir, backbone, options: MethodOptions) -> Built:
    evaluated = options.lam is None or (run_dir / "results.json").exists()  # a given λ needs no evaluated run
    results = run_results(run_dir) if evaluated else {}
    lam = results["lambda"] if options.lam is None else options.lam
    mixed = MemoryAugmentedForCausalLM.from_memory(run_dir / "memory", backbone[0], backbone[1], lam=lam)
    offline = sum(_stage_seconds(run_dir, s) or 0.0 for s in ("keys_train", "teacher", "train"))
    cost = {"trainable_parameters": results.get("memory_trainable_parameters"), "train_seconds": offline,
            "train_seconds_memory_only": _stage_seconds(run_dir, "train"),
            "inference_bytes": results.get("memory_bytes")}
    return Built(mixed, prompt_builder(options.shots), {"lambda": lam}, cost)


def _memory_gate(run_dir, backbone, options: MethodOptions) -> Built:
    gate_dir = run_dir / "gate"
    if not (gate_dir / "gate.json").exists():
        raise ConfigError(f"method memory-gate needs the run's gate in {gate_dir}: train it with `mlpmem gate`")
    built = _memory(run_dir, backbone, dataclasses.replace(options, lam=None))
    built.model.set_gate(load_gate(gate_dir, built.model.memory))
    return dataclasses.replace(built, info={"gate": True, "lambda_fixed": built.info["lambda"]})


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("backbone", _backbone),
    Method("rag-dense", _rag("dense"), needs_docs=True),
    Method("rag-bm25", _rag("bm25"), needs_docs=True),
    Method("knnlm", _knnlm, needs_run=True, mixes=True),
    Method("cpt", _cpt, needs_docs=True),
    Method("lora", _lora, needs_docs=True),
    Method("memory", _memory, needs_run=True, mixes=True, reads_memory=True),
    Method("memory-gate", _memory_gate, needs_run=True, reads_memory=True),
)}
"""Every compared method by name, in the order the reports list them."""
