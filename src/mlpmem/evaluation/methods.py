"""The compared methods as models lm-eval can score: ``model_args`` checked (:class:`MethodArgs`), then built
(:func:`build_model`) for the ``mlpmem`` model type of :mod:`mlpmem.evaluation.harness`.

  - ``memory``: the run's memory-augmented model (or ``pretrained=`` a saved one), at ``lam`` or with its ``gate``;
  - ``backbone``: the run's backbone alone (or ``pretrained=`` any causal LM folder with its tokenizer, e.g. a
    model whose package registered its type with the Auto classes);
  - ``knnlm``: the backbone with the kNN-LM hooks of :func:`~mlpmem.baselines.methods.build_method`;
  - ``rag-dense`` / ``rag-bm25``: the backbone, and the :class:`~mlpmem.baselines.rag.RAG` of ``build_method``
    over ``docs=`` (a JSON list or JSON lines of ``{"text"}``; default: the train split of the run's corpus,
    as the QA suite gives RAG its memory corpus); the adapter puts the retrieved passages before every context;
  - ``cpt`` / ``lora``: the fine-tuned model in ``weights=`` (:func:`~mlpmem.baselines.finetuned.load_finetuned`;
    written by :func:`~mlpmem.baselines.finetuned.save_finetuned`), on the run's backbone and tokenizer;

Every method reads ``precision=``: ``fp32`` (default), ``bf16`` (every model call under bf16 autocast, the weights
staying fp32 and cast once per scoring call, :func:`~mlpmem.compute.inference_scope`; the returned logits fp32)
or ``auto`` (bf16 where the hardware computes it natively,
:func:`~mlpmem.compute.resolve_precision`).

Every misuse is a one-line :class:`~mlpmem.errors.ConfigError`, before anything loads: an unknown method, a
missing source (``run=`` / ``pretrained=``) or ``weights=``, a precision other than those three, and an option
the method does not read.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from mlpmem.backbone import load_backbone
from mlpmem.baselines.finetuned import load_finetuned
from mlpmem.baselines.methods import MethodOptions, build_method
from mlpmem.baselines.rag import RAG, RAGConfig
from mlpmem.compute import autocast, check_precision
from mlpmem.corpora.documents import read_documents, split_files
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.inference.gate import check_floor
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.pipeline.corpus import corpus_folder
from mlpmem.pipeline.hf_export import AUTO, augmented_from_run, open_run, run_lambda

RAG_METHODS = ("rag-dense", "rag-bm25")
RAG_OPTIONS = ("top_k", "passage_words", "max_prompt_tokens")
OPTIONS: dict[str, tuple[str, ...]] = {
    "memory": ("lam", "gate", "gate_offset", "gate_floor", "gate_dir"),
    "backbone": (),
    "knnlm": ("lam",),
    **{m: ("docs", *RAG_OPTIONS) for m in RAG_METHODS},
    "cpt": ("weights",),
    "lora": ("weights",),
}
"""Every method of ``method=`` and the model_args it reads besides its source (``run=`` / ``pretrained=``)."""
METHODS = tuple(OPTIONS)
PRETRAINED = ("memory", "backbone")
"""The methods that take ``pretrained=`` instead of ``run=``."""

Mixing = Callable[[], contextlib.AbstractContextManager]


@dataclass
class MethodArgs:
    """The ``mlpmem`` model type's own model_args (every other one is ``HFLM``'s)."""

    run: str | None = None
    """A finished run folder: its backbone, memory, datastore, corpus."""
    pretrained: str | None = None
    """Instead of ``run``: a saved memory-augmented folder (memory), or a causal LM folder with its tokenizer
    (backbone)."""
    method: str = "memory"
    lam: float | str = AUTO
    """``auto`` (the run's validation choice) or a number in [0, 1] (memory, knnlm)."""
    gate: bool = False
    """The run's learned gate instead of one λ (memory)."""
    gate_offset: float = 0.0
    """With ``gate``: added to the gate's logit (:meth:`~mlpmem.inference.gate.Gate.set_offset`; the QA suite
    chooses one on its validation questions)."""
    gate_floor: float = 0.0
    """With ``gate``: λ_t below it is exactly 0 (:meth:`~mlpmem.inference.gate.Gate.set_floor`; the QA suite
    chooses one on its validation questions)."""
    gate_dir: str | None = None
    """With ``gate``: the folder of another gate saved with the run's memory (e.g. the QA suite's gate trained on
    questions, ``<benchmark>/gate-questions``) instead of the run's ``gate/``."""
    docs: str | None = None
    """RAG's documents: a JSON / JSON lines file of ``{"text"}``; None: the train split of the run's corpus."""
    weights: str | None = None
    """CPT's model or LoRA's adapter folder (:func:`~mlpmem.baselines.finetuned.save_finetuned`)."""
    top_k: int | None = None
    passage_words: int | None = None
    max_prompt_tokens: int | None = None
    """RAG settings (None: :class:`~mlpmem.baselines.rag.RAGConfig`'s defaults)."""
    precision: str = "fp32"
    """Compute precision of every model call, any method: ``fp32``, ``bf16`` (autocast) or ``auto``."""
    rag: RAGConfig | None = field(default=None, init=False)
    """The RAG settings checked, for a RAG method."""

    def __post_init__(self):
        method = self.method
        if method not in OPTIONS:
            raise ConfigError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
        self._check_source()
        if not isinstance(self.gate, bool):
            raise ConfigError(f"gate must be true or false, got {self.gate!r}")
        check_precision(self.precision)
        check_floor(self.gate_floor, "gate_floor")
        defaults = MethodArgs.__dataclass_fields__
        for key in ("lam", "gate", "gate_offset", "gate_floor", "gate_dir", "docs", "weights", *RAG_OPTIONS):
            if getattr(self, key) != defaults[key].default and key not in OPTIONS[method]:
                users = [m for m, keys in OPTIONS.items() if key in keys]
                raise ConfigError(f"{key}= applies to method={' or '.join(users)}, not {method}")
        for key in ("gate_offset", "gate_floor", "gate_dir"):
            if getattr(self, key) != defaults[key].default and not self.gate:
                raise ConfigError(f"{key}= needs gate=true")
        if self.gate and self.lam != AUTO:
            raise ConfigError("lam= and gate=true exclude each other: the gate sets λ_t at every position")
        if "weights" in OPTIONS[method] and self.weights is None:
            raise ConfigError(f"method={method} needs weights=<folder written by save_finetuned>")
        if self.lam != AUTO:
            run_lambda(None, self.lam)  # a number in [0, 1]
        if method in RAG_METHODS:
            given = {k: getattr(self, k) for k in RAG_OPTIONS if getattr(self, k) is not None}
            self.rag = RAGConfig(retriever=method.removeprefix("rag-"), **given)

    def _check_source(self) -> None:
        if (self.run is None) == (self.pretrained is None):
            raise ConfigError("model_args need exactly one of run=<run folder> or pretrained=<saved folder>")
        if self.pretrained is not None and self.method not in PRETRAINED:
            raise ConfigError("pretrained= is a saved memory-augmented model (method=memory) or a causal LM folder "
                              f"with its tokenizer (method=backbone), not method={self.method}")

    def source(self) -> dict:
        """What was evaluated, for lm-eval's results."""
        out = {"run": None if self.run is None else str(Path(self.run)), "pretrained": self.pretrained,
               "method": self.method, "precision": self.precision}
        return out | {k: getattr(self, k) for k in OPTIONS[self.method] if k not in RAG_OPTIONS} | (
            {} if self.rag is None else {"rag": self.rag.to_dict()})


@dataclass
class Loaded:
    """A method ready for ``HFLM``."""

    model: nn.Module
    tokenizer: object
    mixing: Mixing = contextlib.nullcontext
    """The context every model call runs in (kNN-LM's hooks; autocast at a precision other than fp32)."""
    lam: float | None = None
    """The λ used (None where nothing is mixed)."""
    rag: RAG | None = None
    """RAG's retrieval, whose passages go before every context."""
    caches: bool = True
    """The model takes and returns a KV cache (``cache``), so a shared context can run once."""
    mixer: nn.Module | None = None
    """memory, knnlm: what mixes the backbone's logits with the method's distribution, ``mixer.mix(lm_logits,
    keys)`` (its keys: the run's layer and site), so that several methods can share one backbone pass
    (:mod:`mlpmem.evaluation.one_pass`)."""


def read_docs(path: str | Path) -> list[dict]:
    """``[{"text"}]`` of a JSON file (a list of ``{"text"}``) or of what :func:`read_documents` reads (JSON lines,
    text files, a folder of them)."""
    path = Path(path).expanduser()
    if path.suffix != ".json":
        return [{"text": d.text} for d in read_documents(path)]
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"docs={path}: not a readable JSON file ({type(exc).__name__})") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and isinstance(r.get("text"), str)
                                                         for r in rows):
        raise ConfigError(f"docs={path} must be a non-empty JSON list of {{\"text\": ...}} documents")
    return [{"text": r["text"]} for r in rows]


def run_documents(run) -> list[dict]:
    """The train split of the run's corpus (the documents its datastore and memory were built from)."""
    try:
        return [{"text": d.text} for d in read_documents(split_files(corpus_folder(run))["train"])]
    except CorpusError as exc:
        raise ConfigError(f"the run's training documents cannot be read ({exc}): give docs=<JSON/JSONL file>") \
            from None


def load_pretrained(folder: str) -> Loaded:
    """A causal LM folder (its type known to the Auto classes) and the tokenizer saved with it; a model whose
    forward takes no KV cache (``cache``) is scored without a shared context."""
    path = Path(folder).expanduser()
    if path.is_dir() and not (path / "tokenizer_config.json").is_file():
        raise ConfigError(f"pretrained={folder} has no tokenizer (save the tokenizer into the model folder)")
    model, tokenizer = load_backbone(folder)
    caches = "cache" in inspect.signature(model.forward).parameters
    return Loaded(model, tokenizer, caches=caches)


@contextlib.contextmanager
def _at_precision(model: nn.Module, precision: str, mixing: Mixing):
    """``mixing()`` entered under ``model``'s autocast at ``precision`` (resolved on its device at each call)."""
    with autocast(model, precision), mixing():
        yield


def build_model(args: MethodArgs, run=None) -> Loaded:
    """The model, tokenizer, mixing context (at ``args.precision``), λ and retrieval of ``args.method``; ``run``:
    the run of ``args.run`` already opened (its backbone is shared by every model built from it)."""
    loaded = _build(args, run)
    if args.precision != "fp32":
        loaded.mixing = functools.partial(_at_precision, loaded.model, args.precision, loaded.mixing)
    return loaded


def _build(args: MethodArgs, run=None) -> Loaded:
    if args.pretrained is not None and args.method == "backbone":
        return load_pretrained(args.pretrained)
    if args.pretrained is not None:
        model = MemoryAugmentedForCausalLM.from_pretrained(args.pretrained)
        if args.lam != AUTO:
            model.lam = args.lam
        return Loaded(model, model.tokenizer, lam=model.lam, mixer=model)
    run = run or open_run(args.run)
    if args.method == "memory":
        model = augmented_from_run(run, args.lam, args.gate, args.gate_offset, args.gate_dir, args.gate_floor)
        return Loaded(model, model.tokenizer, lam=model.lam, mixer=model)
    backbone, tokenizer = run.backbone
    if args.method == "backbone":
        return Loaded(backbone, tokenizer)
    if args.method == "knnlm":
        options = MethodOptions(lam=None if args.lam == AUTO else args.lam, progress=False)
        decoder = build_method("knnlm", run.dir, run.backbone, options).model
        return Loaded(backbone, tokenizer, decoder.active, decoder.lam, mixer=decoder)
    if args.method in RAG_METHODS:
        docs = read_docs(args.docs) if args.docs is not None else run_documents(run)
        built = build_method(args.method, run.dir, run.backbone, MethodOptions(docs=docs, rag=args.rag,
                                                                               progress=False))
        return Loaded(backbone, tokenizer, rag=built.rag)
    return Loaded(load_finetuned(args.method, args.weights, run.backbone), tokenizer)  # cpt, lora
