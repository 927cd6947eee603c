"""Studies built on the library (which never imports them): the QA suite, local lm-eval tasks, speed benchmarks,
ablations, data scaling and update studies, each with its configs; ``python -m studies`` runs them."""
