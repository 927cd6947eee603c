"""Evaluation with lm-evaluation-harness: the ``mlpmem`` model type (:mod:`mlpmem.evaluation.harness`).

Importing :mod:`mlpmem.evaluation.harness` registers the ``mlpmem`` model type with lm-eval and (through
:mod:`mlpmem.inference.hf_model`) the ``mlpmem`` model type with transformers' Auto classes.
"""
