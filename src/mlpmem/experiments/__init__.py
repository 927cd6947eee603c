"""Experiments built on the library (which never imports them): QA, benchmarks, ablations."""
