"""lm-evaluation-harness model type ``mlpmem``: every compared method of a run, scored by lm-eval.

``MlpmemLM`` is lm-eval's own ``HFLM`` given a ready model instance, so loglikelihood, loglikelihood_rolling
and generate_until (batched, stop strings, KV cache) are lm-eval's code. The methods
(:mod:`mlpmem.evaluation.methods`):

  - ``method=memory`` (default): :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM` of the run
    (:func:`~mlpmem.pipeline.hf_export.augmented_from_run`), whose logits are already
    log((1 - λ) p_LM + λ p_mem); ``pretrained=<folder>`` loads a saved one instead of a run;
  - ``method=backbone``: the run's backbone alone;
  - ``method=knnlm``: the backbone with :class:`~mlpmem.baselines.knnlm.KnnLMDecoder`'s hooks installed
    around every forward and generate (exact search over the run's datastore, the k, T and λ of its sweep);
  - ``method=rag-dense|rag-bm25``: the backbone; every loglikelihood and generate_until request's context gets
    the passages retrieved with that context as the query put before it
    (:meth:`~mlpmem.baselines.rag.RAG.context_prompts`: the QA prompt's passage block, under
    ``max_prompt_tokens``), retrieval batched over the requests; loglikelihood_rolling has no context to
    retrieve with and is refused;
  - ``method=cpt|lora``: the fine-tuned model saved in ``weights=<folder>``
    (:func:`~mlpmem.baselines.finetuned.save_finetuned`), on the run's backbone and tokenizer;
  - ``method=backbone`` with ``pretrained=<folder>``: any causal LM folder with its own tokenizer.

model_args: ``run=<run folder>`` (or ``pretrained=<folder>``), ``method=``, ``lam=auto|<float>`` ("auto": the
run's validation choice), ``share_context=false`` (every loglikelihood request runs its context anew, as
``HFLM`` does; default: requests sharing a context run it once, :mod:`mlpmem.evaluation.shared_context`),
``gate=true`` (the run's learned gate; ``gate_offset=`` shifts its logit, ``gate_floor=`` closes it exactly
below that λ_t, ``gate_dir=``
takes another gate saved with the run's memory), ``precision=fp32|bf16|auto`` (bf16: every model call under
autocast, held open around each of lm-eval's calls so that each fp32 weight is cast once per call of lm-eval, not
per forward; every log-likelihood at bf16's rounding; ``python -m studies bench lm-eval --compare-precision bf16``
measures the speed and how far the scores move), ``docs=``, ``top_k=``,
``passage_words=``, ``max_prompt_tokens=`` (RAG), ``weights=`` (CPT, LoRA), plus any ``HFLM`` argument
(``batch_size``, ``max_length``, ``device``...). lm-eval only knows the type once this module is imported:
``mlpmem lm-eval`` and ``python -m mlpmem.evaluation`` import it first.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import torch
from lm_eval import simple_evaluate
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import model_registry, register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable, make_table

from mlpmem.compute import compute_device, inference_scope, model_device, resolve_precision
from mlpmem.errors import ConfigError
from mlpmem.evaluation.methods import METHODS, MethodArgs, build_model
from mlpmem.evaluation.shared_context import forward_on_cache, shared_context_loglikelihood, shared_groups
from mlpmem.pipeline.hf_export import AUTO
from mlpmem.utils.shards import atomic_write_bytes

MODEL_NAME = "mlpmem"
__all__ = ["METHODS", "MODEL_NAME", "MlpmemLM", "evaluate", "results_table", "task_manager", "write_results"]


@register_model(MODEL_NAME)
class MlpmemLM(HFLM):
    """lm-eval's ``HFLM`` on a method of a finished mlpmem run (see the module docstring)."""

    def __init__(self, run: str | None = None, pretrained: str | None = None, method: str = "memory",
                 lam: float | str = AUTO, gate: bool = False, gate_offset: float = 0.0, gate_dir: str | None = None,
                 gate_floor: float = 0.0, docs: str | None = None,
                 weights: str | None = None, top_k: int | None = None, passage_words: int | None = None,
                 max_prompt_tokens: int | None = None, precision: str = "fp32", device: str | None = None,
                 share_context: bool = True, **kwargs):
        args = MethodArgs(run=run, pretrained=pretrained, method=method, lam=lam, gate=gate, gate_offset=gate_offset,
                          gate_dir=gate_dir, gate_floor=gate_floor, docs=docs, weights=weights, top_k=top_k,
                          passage_words=passage_words, max_prompt_tokens=max_prompt_tokens, precision=precision)
        if not isinstance(share_context, bool):
            raise ConfigError(f"share_context must be true or false, got {share_context!r}")
        loaded = build_model(args)
        if device:
            loaded.model.to(device)
        if resolve_precision(precision, model_device(loaded.model)) == "bf16":  # HFLM's own calls autocast by it
            kwargs.setdefault("mixed_precision_dtype", torch.bfloat16)
        kwargs.setdefault("backend", "causal")
        super().__init__(pretrained=loaded.model, tokenizer=loaded.tokenizer, **kwargs)
        self._mixing, self._rag = loaded.mixing, loaded.rag
        self._scope = functools.partial(inference_scope, loaded.model, precision)  # around each lm-eval call
        self.share_context, self._caches = share_context, loaded.caches
        self._source = args.source() | ({"lam": loaded.lam} if loaded.lam is not None else {})

    def _with_passages(self, requests: list[Instance]) -> list[Instance]:
        """RAG: copies of ``requests`` whose context (first argument) has the retrieved passages before it."""
        if self._rag is None:
            return requests
        prompts = self._rag.context_prompts([r.args[0] for r in requests])
        return [dataclasses.replace(r, arguments=(p, *r.args[1:])) for r, p in zip(requests, prompts)]

    def rag_context_counts(self) -> dict[str, int] | None:
        """RAG: the contexts scored so far and those that got no passage (:meth:`RAG.context_counts
        <mlpmem.baselines.rag.RAG.context_counts>`); None for another method."""
        return None if self._rag is None else self._rag.context_counts()

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        with self._scope():
            return super().loglikelihood(self._with_passages(requests), disable_tqdm)

    def generate_until(self, requests, disable_tqdm: bool = False):
        with self._scope():
            return super().generate_until(self._with_passages(requests), disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        if self._rag is not None:
            raise ConfigError("loglikelihood_rolling is not defined for RAG (a rolling text has no context to "
                              "retrieve with): score RAG on loglikelihood or generate_until tasks")
        with self._scope():
            return super().loglikelihood_rolling(requests, disable_tqdm)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        """``HFLM``'s, with the requests that share a context scored after one run of it
        (:mod:`mlpmem.evaluation.shared_context`); the rest, and every request with ``share_context=false``,
        go through ``HFLM``'s own batched path."""
        if not (self.share_context and self._caches) or self.backend != "causal":
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        groups, rest = shared_groups(requests, self.max_length)
        batch_size = override_bs or (self.batch_size if isinstance(self.batch_size, int) else 8)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        shared = shared_context_loglikelihood(self._cached_forward, requests, groups, batch_size, pad_id,
                                              progress=not disable_tqdm and self.rank == 0)
        for i, answer in shared.items():
            if requests[i][0] is not None:
                self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)
        plain = super()._loglikelihood_tokens([requests[i] for i in rest], disable_tqdm, override_bs) if rest else []
        scored = shared | dict(zip(rest, plain))
        return [scored[i] for i in range(len(requests))]

    def _cached_forward(self, ids, past, last_only: bool):
        """The model on ``ids`` after ``past`` (its KV cache), in the method's mixing context."""
        with self._mixing():
            out = forward_on_cache(self.model, ids, past, last_only)
        return out.logits, out.cache

    def _model_call(self, inps, attn_mask=None, labels=None):
        """``HFLM``'s call in the method's mixing context; the logits in fp32 (bf16 under autocast), since ``HFLM``
        takes their log-softmax outside that context."""
        with self._mixing():
            return super()._model_call(inps, attn_mask, labels).float()

    def _model_generate(self, context, max_length, stop, **generation_kwargs):
        with self._mixing():
            return super()._model_generate(context, max_length, stop, **generation_kwargs)

    def get_model_info(self) -> dict:
        """What was evaluated (run, method, λ, RAG settings) and the parameter count; no hub lookup of a model sha."""
        return {"model_num_parameters": sum(p.numel() for p in self._model.parameters()),
                "model_dtype": str(self._model.dtype), "mlpmem": self._source}


# ---------------------------------------------------------------------------------------------
# Running lm-eval (``mlpmem lm-eval`` is this, from the command line)


def task_manager(include_path: str | Path | None = None, local_only: bool = False) -> TaskManager:
    """lm-eval's tasks plus the task YAMLs under ``include_path``; ``local_only``: those alone (faster to index,
    and nothing that needs a hub dataset)."""
    if include_path is not None and not Path(include_path).is_dir():
        raise ConfigError(f"--include-path {include_path}: no such folder of task YAML files")
    if local_only and include_path is None:
        raise ConfigError("local_only needs an include_path holding the task YAML files")
    return TaskManager(include_path=None if include_path is None else str(include_path),
                       include_defaults=not local_only)


def evaluate(tasks: list[str], model: str | LM = MODEL_NAME, model_args: str | dict = "", *,
             include_path: str | Path | None = None, local_only: bool = False, limit: float | None = None,
             num_fewshot: int | None = None, batch_size: int | str = 1, device: str | None = None,
             log_samples: bool = False) -> dict:
    """``lm_eval.simple_evaluate`` of ``model`` (``mlpmem``, ``hf``, any registered type, or a built lm-eval
    ``LM``, which ignores ``model_args``) on ``tasks``, on ``device`` (default: :func:`~mlpmem.compute.compute_device`,
    this process's GPU if there is one, else the CPU; lm-eval's own default is cuda)."""
    if isinstance(model, str) and model not in model_registry:
        raise ConfigError(f"unknown lm-eval model type {model!r} (e.g. {MODEL_NAME} or hf)")
    manager = task_manager(include_path, local_only)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise ConfigError(f"unknown task(s) {', '.join(unknown)}" + ("" if include_path else
                          " (local tasks need --include-path FOLDER)"))
    device = str(compute_device(device or "auto"))
    return simple_evaluate(model=model, model_args=model_args, tasks=tasks, task_manager=manager, limit=limit,
                           num_fewshot=num_fewshot, batch_size=batch_size, device=device, log_samples=log_samples)


def results_table(results: dict) -> str:
    """lm-eval's own Markdown table of the scores (and of the groups, if any)."""
    table = make_table(results)
    return table + ("\n" + make_table(results, "groups") if results.get("groups") else "")


def write_results(results: dict, path: str | Path) -> Path:
    """``results`` (as lm-eval returns them, samples included if logged) as JSON at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1, default=handle_non_serializable, ensure_ascii=False)
    atomic_write_bytes(path, (text + "\n").encode())
    return path
