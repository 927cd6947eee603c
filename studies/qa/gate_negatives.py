"""Where the question gate should stay closed: general knowledge that no benchmark's corpus holds.

With ``gate_training: questions`` the suite trains the gate on the validation questions of a benchmark
(:mod:`studies.qa.question_gate`); ``gate_negatives: N`` adds N items where the backbone should
speak, from one of two sources:

- ``qa_wikidata`` cloze facts (default): the last of its seeded order, never one of the no-regression sample
  (its first ``no_regression.qa_wikidata``), each in the benchmark's question prompt;
- BIG-bench multiple-choice tasks (``gate_negative_tasks``): each item's gold choice after the task's own
  prompt and answer prefix, the text lm-eval's battery scores, so the gate sees the battery's kind of text
  without its items. The tasks must come from families (the part of a task name before ``/``) that neither the
  battery nor the no-regression checks score; the N items are split evenly over them, the first of each task's
  seeded order. With ``gate_negatives_unconditional`` each item comes twice: in its prompt, and as the
  unconditional term of lm-eval's domain-conditional PMI (``acc_mutual_info``) scores it, the gold choice after
  the start token and the answer prefix alone (``"after_bos"``). A gate that sees only the first opens on the
  second, where the backbone knows least (a bare answer prefix), and a PMI score then divides by a mixture the
  conditional term did not use.
"""

from __future__ import annotations

import sys

from memory_mosaics.experiments.bigbench import multiple_choice, qa_wikidata, read_task
from mlpmem.errors import ConfigError
from studies.qa.config import QASuiteConfig
from studies.tasks.catalog import DEFAULT_NINE
from studies.tasks.choice_tasks import answer_delimiter, rows


def gate_negatives(cfg: QASuiteConfig) -> list[dict]:
    """The suite's ``gate_negatives`` items: ``{"id", "question", "answers"}`` (qa_wikidata, asked in the
    benchmark's prompt) or ``{"id", "prompt", "answers"}`` (BIG-bench, in the task's own prompt)."""
    if not cfg.gate_negatives:
        return []
    return _bigbench(cfg) if cfg.gate_negative_tasks else _wikidata(cfg)


def _wikidata(cfg: QASuiteConfig) -> list[dict]:
    facts = qa_wikidata(sys.maxsize, cfg.seed)  # all, in the seeded order whose first items the no-regression takes
    if cfg.gate_negatives + cfg.no_regression.qa_wikidata > len(facts):
        raise ConfigError(f"qa gate_negatives {cfg.gate_negatives} + no_regression.qa_wikidata "
                          f"{cfg.no_regression.qa_wikidata} exceed the {len(facts)} qa_wikidata facts")
    return facts[len(facts) - cfg.gate_negatives:]


def family(task: str) -> str:
    return task.split("/")[0]


def scored_families(cfg: QASuiteConfig) -> set[str]:
    """The BIG-bench task families the suite scores: the battery's tasks and the no-regression checks'."""
    battery = (cfg.battery.mc_tasks or list(DEFAULT_NINE)) + cfg.battery.truthfulness if cfg.battery else []
    return {family(t) for t in battery + list(cfg.no_regression.mc_tasks)}


def _bigbench(cfg: QASuiteConfig) -> list[dict]:
    tasks = cfg.gate_negative_tasks
    clash = sorted({family(t) for t in tasks} & scored_families(cfg))
    if clash:
        raise ConfigError(f"qa gate_negative_tasks: the suite scores the task families {clash}: choose others")
    share, extra = divmod(cfg.gate_negatives, len(tasks))
    out = []
    for i, task in enumerate(tasks):
        want = share + (i < extra)
        if not want:
            continue
        items = multiple_choice(task, want, cfg.seed)
        if len(items) < want:
            raise ConfigError(f"qa gate_negative_tasks: {task} has {len(items)} single-label items, {want} wanted")
        data = read_task(task)
        prefix = answer_delimiter(data).rstrip(" ")  # "\nA:" (answer_ids adds " " + the choice), or ""
        for row in rows(items, data):
            gold = [row["choices"][row["label"]]]
            out.append({"id": row["id"], "prompt": row["prompt"] + prefix, "answers": gold})
            if cfg.gate_negatives_unconditional:
                out.append({"id": f"{row['id']}:unconditional", "prompt": prefix, "answers": gold, "after_bos": True})
    return out
