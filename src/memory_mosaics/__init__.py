"""Memory Mosaics v2 (Zhang & Bottou, NeurIPS 2025) and its matched Llama-style Transformer.

Its model registers the ``memory_mosaics_v2`` model type with transformers' Auto classes when it is imported
(``from memory_mosaics import MosaicsForCausalLM``, or ``import memory_mosaics.model``), so a trained model folder
then loads by path like any causal LM (mlpmem's backbone loader, lm-eval's ``hf`` type). The names are imported
on first use, so ``import memory_mosaics`` and its command line's help load no torch. It builds on ``mlpmem``,
which never imports it.
"""

from __future__ import annotations

import importlib

__all__ = ["MosaicsConfig", "MosaicsForCausalLM", "MosaicsModel"]

_HOMES = {"MosaicsConfig": "memory_mosaics.model", "MosaicsForCausalLM": "memory_mosaics.model",
          "MosaicsModel": "memory_mosaics.model"}
"""Where each public name lives (the model module, whose import registers the model type)."""


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'memory_mosaics' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
