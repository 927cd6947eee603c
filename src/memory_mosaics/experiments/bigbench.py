"""Real QA data from a copy of the ``bigbench==1.0.0`` source archive, read with ``tarfile`` (never installed).

PyPI no longer serves ``bigbench==1.0.0``, so the archive is read only from a local copy named by ``archive=`` or
``$MLPMEM_BIGBENCH_ARCHIVE``: the sdist, or an archive of the ``google/BIG-bench`` repository (any top folder: a task
is found by its path under ``bigbench/benchmark_tasks/``). Without one, a reader stops with a one-line
``CorpusError`` that says so.

Readers (deterministic: items are subsampled with a seeded hash order, never ``random``)::

    paragraphs, questions = disfl_qa(max_paragraphs=300, seed=0)
        # paragraphs: [{"id", "text"}]  (the memory corpus: Wikipedia paragraphs)
        # questions:  [{"id", "question", "answers", "paragraph"}]  (answerable SQuAD questions, disfluent
        #             wording from Disfl-QA; "paragraph" is the id of the paragraph holding the answer)
    facts = qa_wikidata(limit=500, seed=0)
        # [{"id", "question", "answers", "cloze": True}]  ("The country of 1912 Summer Olympics is")
    items = multiple_choice("general_knowledge", limit=100, seed=0)
        # [{"id", "question", "choices", "label"}]  (label = index of the correct choice)
    read_task("disfl_qa")  # the raw task.json dict
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path

from mlpmem.errors import CorpusError

BIGBENCH_PIP_SPEC = "bigbench==1.0.0"
ARCHIVE_ENV = "MLPMEM_BIGBENCH_ARCHIVE"
"""The environment variable naming a local copy of the archive."""
TASK_MEMBER = "bigbench-1.0.0/bigbench/benchmark_tasks/{task}/{file}"
TASK_FILES = {"truthful_qa": "task_mc.json"}
"""Programmatic tasks (a ``task.py``) whose multiple-choice items ship as a JSON file beside it: TruthfulQA's
MC1 items (one true answer among imitative falsehoods) are ``truthful_qa/task_mc.json``."""


def task_member(task: str) -> str:
    """The archive member holding ``task``'s JSON: ``task.json``, or the file :data:`TASK_FILES` names."""
    return TASK_MEMBER.format(task=task, file=TASK_FILES.get(task, "task.json"))


def bigbench_archive(archive: str | Path | None = None) -> Path:
    """The archive ``archive`` or ``$MLPMEM_BIGBENCH_ARCHIVE`` names (a one-line ``CorpusError`` without one)."""
    archive = archive or os.environ.get(ARCHIVE_ENV)
    if not archive:
        raise CorpusError(f"BIG-bench data needs a copy of the {BIGBENCH_PIP_SPEC} archive (PyPI no longer serves it): "
                          "set MLPMEM_BIGBENCH_ARCHIVE to it or to an archive of the google/BIG-bench repository")
    if not Path(archive).is_file():
        raise CorpusError(f"bigbench archive {archive} not found")
    return Path(archive)


def read_task(task: str, archive: str | Path | None = None) -> dict:
    """The ``task.json`` of one BIG-bench task (for :data:`TASK_FILES` its items' JSON)."""
    path = bigbench_archive(archive)
    with tarfile.open(path) as tar:
        return json.loads(tar.extractfile(_member(tar, task, path)).read())


def _member(tar: tarfile.TarFile, task: str, path: Path) -> tarfile.TarInfo:
    """``task``'s JSON in ``tar``: at the sdist's path, or under any other top folder (a repository archive)."""
    try:
        return tar.getmember(task_member(task))
    except KeyError:
        pass
    tail = task_member(task).split("/", 1)[1]  # bigbench/benchmark_tasks/<task>/<file>
    for member in tar.getmembers():
        if member.isfile() and member.name.split("/", 1)[-1] == tail:
            return member
    raise CorpusError(f"bigbench task {task!r} has no {Path(tail).name} in {path.name}")


def _order(keys, seed: int) -> list:
    return sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())


def detokenize(text: str) -> str:
    """Undo SQuAD's space-separated punctuation (``Earth ' s`` -> ``Earth's``, ``( see ) .`` -> ``(see).``)."""
    text = re.sub(r" ' s\b", "'s", text)
    text = re.sub(r" ([,.;:?!%)\]])", r"\1", text)
    text = re.sub(r"([(\[$]) ", r"\1", text)
    text = re.sub(r"(\w) - (\w)", r"\1-\2", text)
    return " ".join(text.split())


def _paragraph_id(text: str) -> str:
    return "p" + hashlib.sha256(text.encode()).hexdigest()[:12]


def disfl_qa(max_paragraphs: int | None = None, seed: int = 0, archive=None) -> tuple[list[dict], list[dict]]:
    """Wikipedia paragraphs and their answerable questions (``unknown`` targets dropped).

    ``max_paragraphs`` keeps a seeded subset of paragraphs and only the questions over them.
    """
    examples = read_task("disfl_qa", archive)["examples"]
    paragraphs: dict[str, str] = {}
    questions = []
    for i, ex in enumerate(examples):
        question, _, context = ex["input"].partition("\ncontext:")
        answers = ex["target"] if isinstance(ex["target"], list) else [ex["target"]]
        answers = [detokenize(a) for a in answers if a.strip() and a.strip().lower() != "unknown"]
        text = detokenize(context)
        pid = _paragraph_id(text)
        paragraphs.setdefault(pid, text)
        if answers:
            questions.append({"id": f"disfl_qa:{i}", "question": detokenize(question), "answers": answers,
                              "paragraph": pid})
    keep = _order(paragraphs, seed)[:max_paragraphs] if max_paragraphs else list(paragraphs)
    kept = set(keep)
    return ([{"id": pid, "text": paragraphs[pid]} for pid in sorted(kept)],
            [q for q in questions if q["paragraph"] in kept])


def qa_wikidata(limit: int | None = None, seed: int = 0, archive=None) -> list[dict]:
    """Cloze facts (``"The country of X is"`` -> ``["Spain"]``): general knowledge the backbone may have."""
    examples = read_task("qa_wikidata", archive)["examples"]
    items = []
    for i, ex in enumerate(examples):
        answers = ex["target"] if isinstance(ex["target"], list) else [ex["target"]]
        items.append({"id": f"qa_wikidata:{i}", "question": ex["input"], "answers": answers, "cloze": True})
    order = _order([it["id"] for it in items], seed)[:limit] if limit else [it["id"] for it in items]
    by_id = {it["id"]: it for it in items}
    return [by_id[i] for i in order]


def multiple_choice(task: str, limit: int | None = None, seed: int = 0, archive=None) -> list[dict]:
    """Items of a ``target_scores`` task: the question, its choices (in file order) and the correct index."""
    data = read_task(task, archive)
    items = []
    for i, ex in enumerate(data.get("examples", [])):
        scores = ex.get("target_scores")
        if not scores:
            continue
        choices = list(scores)
        best = max(scores.values())
        if sum(v == best for v in scores.values()) != 1:
            continue  # several correct choices: not a single-label item
        items.append({"id": f"{task}:{i}", "question": ex["input"].strip(), "choices": choices,
                      "label": choices.index(next(c for c in choices if scores[c] == best))})
    if not items:
        raise CorpusError(f"bigbench task {task!r} has no single-label multiple-choice examples")
    if limit:
        keep = set(_order([it["id"] for it in items], seed)[:limit])
        items = [it for it in items if it["id"] in keep]
    return items
