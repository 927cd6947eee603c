"""Local lm-eval tasks from shipped data (``python -m studies tasks list|screen|prepare``): BIG-bench multiple
choice, the QA suite's questions, ``qa_wikidata`` cloze facts (docs/lm-eval.md)."""
