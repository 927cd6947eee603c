"""Speed benchmarks: ``python -m studies bench infer`` (inference), ``offline`` (offline stages),
``lm-eval`` and ``scale``."""
