"""A BIG-bench multiple-choice task as lm-eval rows, in the task's own prompt format.

Each task's ``task.json`` says how its items are shown: ``task_prefix`` (an instruction), then
``example_input_prefix`` (default ``"\\nQ: "``) before the input and
``example_output_prefix`` (default ``"\\nA: "``) before the answer. Some tasks put the question itself in a
prefix (``social_support``: "Is the following reply unsupportive, neutral, or supportive?"), so the rows keep
them. The choices are not listed in the prompt: each one is scored as the continuation, as the paper's PMI
scoring does. The answer prefix is the PMI's domain premise (:mod:`studies.tasks.writer`); a task
whose answer prefix is empty is scored against the bare choice.

Items: the first ``limit`` single-label items in :func:`memory_mosaics.experiments.bigbench.multiple_choice`'s
seeded order (the items the QA suite's no-regression check used); :func:`screen_items` draws the screen's
items from the rest, so choosing the tasks on the backbone's screen does not select on the evaluated items.
"""

from __future__ import annotations

import hashlib

from memory_mosaics.experiments.bigbench import multiple_choice, read_task

MC_GROUP = "mlpmem_bigbench"
"""The lm-eval group of the nine multiple-choice tasks."""
TRUTH_GROUP = "mlpmem_truthfulness"
"""The lm-eval group of the truthfulness tasks (TruthfulQA multiple choice)."""
DEFAULT_INPUT_PREFIX = "\nQ: "
DEFAULT_OUTPUT_PREFIX = "\nA: "


def task_name(bigbench_task: str) -> str:
    """The lm-eval name of a BIG-bench task: ``mlpmem_bb_`` + its path with ``/`` as ``__``."""
    return "mlpmem_bb_" + bigbench_task.replace("/", "__")


def answer_delimiter(data: dict) -> str:
    """What precedes every choice: ``"\\n" + answer prefix + " "``, or ``" "`` when the task has none."""
    prefix = data.get("example_output_prefix")
    prefix = (DEFAULT_OUTPUT_PREFIX if prefix is None else prefix).strip()
    return f"\n{prefix} " if prefix else " "


def rows(items: list[dict], data: dict) -> list[dict]:
    """lm-eval rows ``{"id", "prompt", "choices", "label"}`` of ``items`` (from ``multiple_choice``): the prompt
    is BIG-bench's own, ``task_prefix + example_input_prefix + input``, stripped."""
    prefix = data.get("example_input_prefix")
    prefix = (data.get("task_prefix") or "") + (DEFAULT_INPUT_PREFIX if prefix is None else prefix)
    return [{"id": item["id"], "prompt": (prefix + item["question"]).strip(), "choices": item["choices"],
             "label": item["label"]} for item in items]


def eval_items(task: str, limit: int | None, seed: int, archive=None) -> tuple[list[dict], dict]:
    """``(items, task.json)``: the first ``limit`` items of the seeded order (all if ``limit`` is None)."""
    return multiple_choice(task, limit, seed, archive), read_task(task, archive)


def screen_items(task: str, limit: int, n: int, seed: int, archive=None) -> tuple[list[dict], dict, int]:
    """``(items, task.json, overlap)``: ``n`` items outside the first ``limit`` (those :func:`eval_items`
    evaluates), in another seeded order; a task with fewer than ``limit + n`` items fills up from the
    evaluated ones and ``overlap`` counts them."""
    every = multiple_choice(task, None, seed, archive)
    evaluated = {item["id"] for item in multiple_choice(task, limit, seed, archive)}

    def order(item: dict) -> str:
        return hashlib.sha256(f"screen:{seed}:{item['id']}".encode()).hexdigest()

    rest = sorted((i for i in every if i["id"] not in evaluated), key=order)
    fill = sorted((i for i in every if i["id"] in evaluated), key=order)
    chosen = (rest + fill)[:n]
    return chosen, read_task(task, archive), sum(i["id"] in evaluated for i in chosen)
