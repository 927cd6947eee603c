"""mlpmem: retrieval-free parametric memory for causal language models (MLP Memory, Wei et al., ICLR 2026).

The pipeline, one package a stage: corpus -> datastore -> kNN-LM -> teacher -> memory -> mixed inference and
evaluation (:mod:`mlpmem.pipeline`). The public API is importable from here; names load on first use, so that
``import mlpmem`` (and the CLI's ``--help``) stays light.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "load_backbone": "mlpmem.backbone",
    "MemoryConfig": "mlpmem.memory",
    "MLPMemory": "mlpmem.memory",
    "MemoryAugmentedForCausalLM": "mlpmem.inference.hf_model",
    "augmented_from_run": "mlpmem.pipeline.hf_export",
    "PipelineConfig": "mlpmem.pipeline.config",
    "Run": "mlpmem.pipeline.run",
    "run_pipeline": "mlpmem.pipeline",
}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'mlpmem' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
