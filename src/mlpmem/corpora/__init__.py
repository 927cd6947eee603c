"""Corpora: documents from text/JSONL, the shipped corpora, memory-mapped token streams."""
