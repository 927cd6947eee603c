"""``mlpmem lm-eval --model-args KEY=VALUE,...``, checked before any model loads.

lm-eval reads the string leniently: it drops an empty item, keeps the last of a key given twice, takes a key with
a space (`` lam``) as another key, and hands a key it does not know to ``HFLM``, which ignores it. Here each item is
taken exactly or refused in one line, a key the model type does not take included, and the ``mlpmem`` model type's
own arguments are checked as its model would check them (:class:`~mlpmem.evaluation.methods.MethodArgs`: ``lam`` in
[0, 1] or ``auto``, one of ``run=``/``pretrained=``...).
"""

from __future__ import annotations

import inspect

from lm_eval.models.huggingface import HFLM
from lm_eval.utils import simple_parse_args_string

from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import MODEL_NAME, MlpmemLM
from mlpmem.evaluation.methods import MethodArgs

HF_TYPES = ("hf", "huggingface")


def _params(function) -> set[str]:
    return {p for p in inspect.signature(function).parameters if p not in ("self", "kwargs")}


def model_keys(model: str) -> set[str] | None:
    """The keys ``model`` (an lm-eval model type) takes; None for a type mlpmem does not know."""
    if model == MODEL_NAME:
        return _params(MlpmemLM.__init__) | _params(HFLM.__init__)
    return _params(HFLM.__init__) if model in HF_TYPES else None


def parse_model_args(text: str | None, model: str) -> dict:
    """``--model-args`` as lm-eval will read it, once every item is checked (see the module docstring)."""
    if not text:
        return {}
    items = text.split(",")
    keys = [_key(item, text) for item in items]
    twice = [k for i, k in enumerate(keys) if k in keys[:i]]
    if twice:
        raise ConfigError(f"--model-args gives {twice[0]}= twice: give it once")
    known = model_keys(model)
    unknown = [k for k in keys if known is not None and k not in known]
    if unknown:
        own = f"{', '.join(sorted(_params(MlpmemLM.__init__)))}, and " if model == MODEL_NAME else ""
        raise ConfigError(f"--model-args: the {model} model type takes no {unknown[0]}= (it takes {own}HFLM's "
                          "arguments: batch_size, max_length...)")
    return simple_parse_args_string(text)


def _key(item: str, text: str) -> str:
    key, sep, _ = item.partition("=")
    if not item.strip():
        raise ConfigError(f"--model-args {text!r} holds an empty item (two commas, or one at an end)")
    if not sep or not key:
        raise ConfigError(f"--model-args item {item!r} is not KEY=VALUE (a value cannot hold a comma)")
    if key != key.strip():
        raise ConfigError(f"--model-args key {key!r} has a space at an end: write KEY=VALUE,KEY=VALUE without spaces")
    return key


def check_method_args(args: dict) -> None:
    """The ``mlpmem`` model type's own arguments of ``args`` checked as its model checks them (nothing loads)."""
    own = {f for f in MethodArgs.__dataclass_fields__ if MethodArgs.__dataclass_fields__[f].init}
    MethodArgs(**{k: v for k, v in args.items() if k in own})
