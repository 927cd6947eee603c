"""The no-regression battery: does a method's model keep the backbone's general capability?

``qa_wikidata`` cloze facts scored by greedy EM, and BIG-bench multiple-choice tasks (both read only from a copy of
the BIG-bench archive; the installable checks run through lm-eval, :mod:`studies.qa.battery`) scored by log-likelihood
and by domain-conditional PMI (:mod:`mlpmem.evaluation.choice`), on the models of one benchmark. Every task
keeps its per-item scores by item id (``per_item``: EM / F1 per fact, 1/0 correctness per multiple-choice item),
so the report pairs each method with the backbone item by item.
"""

from __future__ import annotations

from memory_mosaics.experiments.bigbench import multiple_choice, qa_wikidata
from mlpmem.evaluation.choice import score_multiple_choice
from studies.qa.config import NoRegressionConfig
from studies.qa.eval_qa import GenerationConfig, evaluate_questions
from studies.qa.per_item import PER_ITEM, qa_per_item


def no_regression_items(cfg: NoRegressionConfig, seed: int) -> dict:
    """``{task: items}``: the cloze facts and each multiple-choice task, the same for every method."""
    cloze = {"qa_wikidata": qa_wikidata(cfg.qa_wikidata, seed)} if cfg.qa_wikidata else {}
    return {**cloze, **{t: multiple_choice(t, cfg.mc_limit, seed) for t in cfg.mc_tasks}}


def no_regression(model, tokenizer, items: dict, gen: GenerationConfig) -> dict:
    """``{task: scores}`` of ``model`` on the battery: EM / F1 for the cloze facts, accuracies for multiple choice,
    each with its ``per_item`` scores."""
    out = {}
    for task, rows in items.items():
        if task == "qa_wikidata":
            r = evaluate_questions(model, tokenizer, rows, cfg=gen)
            out[task] = {**{k: r[k] for k in ("em", "f1", "n")}, PER_ITEM: qa_per_item(r["predictions"])}
        else:
            out[task] = score_multiple_choice(model, tokenizer, rows, gen.batch_size)
    return out
