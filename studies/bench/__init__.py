"""Speed benchmarks: ``python -m studies bench infer`` (inference), ``offline`` (offline stages), ``packing``,
``lm-eval`` and ``scale``."""
