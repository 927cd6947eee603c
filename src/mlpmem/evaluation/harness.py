"""lm-evaluation-harness model type ``mlpmem``: a run's memory, its backbone or its kNN-LM, scored by lm-eval.

``MlpmemLM`` is lm-eval's own ``HFLM`` given a ready model instance, so loglikelihood, loglikelihood_rolling
and generate_until (batched, stop strings, KV cache) are lm-eval's code:

  - ``method=memory`` (default): :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM` of the run
    (:func:`~mlpmem.pipeline.hf_export.augmented_from_run`), whose logits are already
    log((1 - λ) p_LM + λ p_mem); ``pretrained=<folder>`` loads a saved one instead of a run;
  - ``method=backbone``: the run's backbone alone;
  - ``method=knnlm``: the backbone with :class:`~mlpmem.baselines.knnlm.KnnLMDecoder`'s hooks installed
    around every forward and generate (exact search over the run's datastore, the k, T and λ of its sweep).

model_args: ``run=<run folder>`` (or ``pretrained=<saved folder>``), ``method=memory|backbone|knnlm``,
``lam=auto|<float>`` ("auto": the run's validation choice), ``gate=true`` (the run's learned gate), plus
any ``HFLM`` argument (``batch_size``, ``max_length``, ``device``...). lm-eval only knows the type once this
module is imported: ``mlpmem lm-eval`` and ``python -m mlpmem.evaluation`` import it first.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import torch
from lm_eval import simple_evaluate
from lm_eval.api.registry import model_registry, register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable, make_table

from mlpmem.baselines.methods import MethodOptions, build_method
from mlpmem.errors import ConfigError
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.pipeline.hf_export import AUTO, augmented_from_run, open_run, run_lambda
from mlpmem.utils.shards import atomic_write_bytes

MODEL_NAME = "mlpmem"
METHODS = ("memory", "backbone", "knnlm")
"""The methods of ``method=``."""

Mixing = Callable[[], contextlib.AbstractContextManager]


def _check_args(run, pretrained, method: str, lam, gate) -> None:
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    if (run is None) == (pretrained is None):
        raise ConfigError("model_args need exactly one of run=<run folder> or pretrained=<saved folder>")
    if pretrained is not None and method != "memory":
        raise ConfigError(f"pretrained= is a saved memory-augmented model: method must be memory, not {method}")
    if method == "backbone" and lam != AUTO:
        raise ConfigError("lam applies to method=memory or knnlm, not backbone")
    if not isinstance(gate, bool):
        raise ConfigError(f"gate must be true or false, got {gate!r}")
    if gate and method != "memory":
        raise ConfigError(f"gate=true is the memory's learned gate: method must be memory, not {method}")
    if lam != AUTO:
        run_lambda(None, lam)  # a number in [0, 1]: checked before anything loads


def build_model(run: str | None = None, pretrained: str | None = None, method: str = "memory",
                lam: float | str = AUTO, gate: bool = False) -> tuple[torch.nn.Module, object, Mixing, float | None]:
    """``(model, tokenizer, mixing, lam)``: what ``HFLM`` scores, the context every model call runs in, and the
    λ used (None for the backbone)."""
    _check_args(run, pretrained, method, lam, gate)
    if pretrained is not None:
        model = MemoryAugmentedForCausalLM.from_pretrained(pretrained)
        if lam != AUTO:
            model.set_lambda(lam)
        return model, model.tokenizer, contextlib.nullcontext, model.lam
    if method == "memory":
        model = augmented_from_run(run, lam, gate)
        return model, model.tokenizer, contextlib.nullcontext, model.lam
    the_run = open_run(run)
    backbone, tokenizer = the_run.backbone
    if method == "backbone":
        return backbone, tokenizer, contextlib.nullcontext, None
    options = MethodOptions(lam=None if lam == AUTO else lam, progress=False)
    decoder = build_method("knnlm", the_run.dir, the_run.backbone, options).model
    return backbone, tokenizer, decoder.active, decoder.lam


@register_model(MODEL_NAME)
class MlpmemLM(HFLM):
    """lm-eval's ``HFLM`` on a method of a finished mlpmem run (see the module docstring)."""

    def __init__(self, run: str | None = None, pretrained: str | None = None, method: str = "memory",
                 lam: float | str = AUTO, gate: bool = False, device: str | None = None, **kwargs):
        model, tokenizer, mixing, lam = build_model(run, pretrained, method, lam, gate)
        if device:
            model.to(device)
        kwargs.setdefault("backend", "causal")
        super().__init__(pretrained=model, tokenizer=tokenizer, **kwargs)
        self._mixing = mixing
        self._source = {"run": None if run is None else str(Path(run)), "pretrained": pretrained,
                        "method": method, "lam": lam, "gate": gate}

    def _model_call(self, inps, attn_mask=None, labels=None):
        with self._mixing():
            return super()._model_call(inps, attn_mask, labels)

    def _model_generate(self, context, max_length, stop, **generation_kwargs):
        with self._mixing():
            return super()._model_generate(context, max_length, stop, **generation_kwargs)

    def get_model_info(self) -> dict:
        """What was evaluated (run, method, λ) and the parameter count; no hub lookup of a model sha."""
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


def evaluate(tasks: list[str], model: str = MODEL_NAME, model_args: str | dict = "", *,
             include_path: str | Path | None = None, local_only: bool = False, limit: float | None = None,
             num_fewshot: int | None = None, batch_size: int | str = 1, device: str | None = None,
             log_samples: bool = False) -> dict:
    """``lm_eval.simple_evaluate`` of ``model`` (``mlpmem``, ``hf``, any registered type) on ``tasks``, on
    ``device`` (default: cuda if there is one, else cpu; lm-eval's own default is cuda)."""
    if model not in model_registry:
        raise ConfigError(f"unknown lm-eval model type {model!r} (e.g. {MODEL_NAME} or hf)")
    manager = task_manager(include_path, local_only)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise ConfigError(f"unknown task(s) {', '.join(unknown)}" + ("" if include_path else
                          " (local tasks need --include-path FOLDER)"))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
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
