"""Real QA data from the ``bigbench==1.0.0`` source archive, read with ``tarfile`` (never installed).

The sdist (358 MB) is fetched once with ``pip download --no-deps --no-binary :all: bigbench==1.0.0`` into
``cache_root()/"downloads"``. pip >= 24 refuses to even download it (its setup declares a ``file://``
dependency), so on that refusal the download is retried with ``pip<24`` in a throw-away virtual
environment. A local copy can be given with ``archive=`` or ``$MLPMEM_BIGBENCH_ARCHIVE``: the sdist, or an archive of
the ``google/BIG-bench`` repository (any top folder: a task is found by its path under
``bigbench/benchmark_tasks/``), for where PyPI no longer serves 1.0.0. Each task's
``task.json`` is extracted once to ``cache_root()/"bigbench"/<task>.json`` (a full archive scan takes ~10 s).

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
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from mlpmem.errors import CorpusError
from mlpmem.utils.io import cache_root

BIGBENCH_PIP_SPEC = "bigbench==1.0.0"
BIGBENCH_ARCHIVE = "bigbench-1.0.0.tar.gz"
TASK_MEMBER = "bigbench-1.0.0/bigbench/benchmark_tasks/{task}/{file}"
TASK_FILES = {"truthful_qa": "task_mc.json"}
"""Programmatic tasks (a ``task.py``) whose multiple-choice items ship as a JSON file beside it: TruthfulQA's
MC1 items (one true answer among imitative falsehoods) are ``truthful_qa/task_mc.json``."""


def task_member(task: str) -> str:
    """The archive member holding ``task``'s JSON: ``task.json``, or the file :data:`TASK_FILES` names."""
    return TASK_MEMBER.format(task=task, file=TASK_FILES.get(task, "task.json"))


def _pip_download(pip: list[str], out: Path) -> subprocess.CompletedProcess:
    command = [*pip, "download", "--no-deps", "--no-binary", ":all:", BIGBENCH_PIP_SPEC, "-d", str(out)]
    return subprocess.run(command, capture_output=True, text=True)


def download_bigbench(download_dir: str | Path | None = None) -> Path:
    """The bigbench sdist in ``download_dir`` (default the mlpmem cache), fetched with pip if missing."""
    out = Path(download_dir) if download_dir is not None else cache_root() / "downloads"
    target = out / BIGBENCH_ARCHIVE
    if target.is_file():
        return target
    out.mkdir(parents=True, exist_ok=True)
    done = _pip_download([sys.executable, "-m", "pip"], out)
    if not target.is_file() and "direct URL" in done.stderr:  # pip >= 24: retry with an older pip
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "venv", tmp], check=True, capture_output=True)
            pip = [str(Path(tmp) / "bin" / "python"), "-m", "pip"]
            subprocess.run([*pip, "install", "-q", "pip<24"], check=True, capture_output=True)
            done = _pip_download(pip, out)
    if not target.is_file():
        lines = done.stderr.strip().splitlines()
        raise CorpusError(f"could not download {BIGBENCH_PIP_SPEC} ({lines[-1] if lines else 'pip wrote no archive'}): "
                          "set MLPMEM_BIGBENCH_ARCHIVE to a copy of it or to an archive of the google/BIG-bench "
                          "repository")
    return target


def bigbench_archive(archive: str | Path | None = None) -> Path:
    archive = archive or os.environ.get("MLPMEM_BIGBENCH_ARCHIVE")
    if archive:
        if not Path(archive).is_file():
            raise CorpusError(f"bigbench archive {archive} not found")
        return Path(archive)
    return download_bigbench()


def read_task(task: str, archive: str | Path | None = None) -> dict:
    """The ``task.json`` of one BIG-bench task (for :data:`TASK_FILES` its items' JSON; extracted once into the
    cache)."""
    archive = archive or os.environ.get("MLPMEM_BIGBENCH_ARCHIVE")
    cached = cache_root() / "bigbench" / f"{task}.json"
    if archive is None and cached.is_file():
        return json.loads(cached.read_text())
    path = bigbench_archive(archive)
    with tarfile.open(path) as tar:
        raw = tar.extractfile(_member(tar, task, path)).read()
    data = json.loads(raw)
    if archive is None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_bytes(raw)
        tmp.replace(cached)
    return data


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
