"""The multiple-choice tasks of the BIG-bench archive, and the rule that picks nine of them for a 135M model.

:func:`list_multiple_choice` scans every ``task.json`` of the ``bigbench==1.0.0`` archive (subtasks
included, e.g. ``goal_step_wikihow/goal_inference``) and describes each task with single-label
multiple-choice items (:class:`TaskInfo`). ``python -m studies tasks list`` prints them with the rule's verdict.

**The rule** (:class:`SelectionRule`, checked in this order; the first failed check is the reason):

1. at least ``min_items`` (200) single-label items, so each task alone has a standard error of about
   3.5 points of accuracy at 200 items;
2. English: ``min_english`` (95 %) of the letters of its inputs are ASCII, and no ``non-English``,
   ``multilingual``, ``translation`` or ``low-resource language`` keyword, unless it is the English
   subtask of a multilingual task (a name ending in ``_en``, e.g. ``multiemo/all_sentence_en``);
3. its choices are words, not option letters (``a`` / ``b``, ``T`` / ``F``): scoring a letter says nothing
   about the answer's text, and PMI against a premise is meaningless for it;
4. natural language: none of the keywords ``non-language``, ``numerical response``, ``computer code``,
   ``algebra``, ``algorithms``, ``arithmetic``, ``mathematics`` (numbers and symbols as answers);
5. no ``logical reasoning``, ``multi-step`` or ``context length`` keyword: chains of deductions over long
   inputs are beyond a 135M model, and screening them would only cost time;
6. no ``social bias`` keyword (bias probes such as ``bbq_lite`` measure a bias, not a capability);
7. cheap to score on 2 cores and short enough for its context: median input at most 120 words, median
   number of choices at most 6, median longest choice at most 20 words.

The tasks that pass are the **candidates**. The rule cannot tell whether the backbone is above chance on
a task; :mod:`studies.tasks.screen` measures it on a subsample disjoint from the evaluated
items and :func:`choose_nine` keeps the nine candidates whose lower interval bound lies furthest above
chance, at most one subtask per task family. :data:`DEFAULT_NINE` is that choice made before the
screen ran (the candidates judged most likely above chance for a small LM): ``python -m studies tasks prepare``
uses it unless given ``--screen screen.json`` or ``--mc-tasks``.
"""

from __future__ import annotations

import json
import statistics
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from memory_mosaics.experiments.bigbench import bigbench_archive, disfl_qa, multiple_choice, qa_wikidata
from mlpmem.config import Config
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.utils.io import cache_root

TASKS_DIR = "/bigbench/benchmark_tasks/"
NON_ENGLISH = {"non-English", "multilingual", "translation", "low-resource language"}
NON_LANGUAGE = {"non-language", "numerical response", "computer code", "algebra", "algorithms", "arithmetic",
                "mathematics"}
MULTI_STEP = {"logical reasoning", "multi-step", "context length"}
BIAS_PROBE = {"social bias"}
DEFAULT_NINE = ("abstract_narrative_understanding/4_distractors", "contextual_parametric_knowledge_conflicts",
                "fact_checker/fever", "goal_step_wikihow/goal_inference", "movie_recommendation",
                "multiemo/all_sentence_en", "social_iqa", "sports_understanding", "winowhy")
"""The nine tasks used until the screen has run (all candidates of the rule; see the module docstring)."""


@dataclass
class SelectionRule(Config):
    min_items: int = 200
    min_english: float = 0.95
    max_input_words: float = 120
    max_choices: float = 6
    max_choice_words: float = 20

    def validate(self) -> None:
        if self.min_items < 1 or not 0 <= self.min_english <= 1:
            raise ConfigError("selection rule: min_items must be >= 1 and min_english in [0, 1]")


@dataclass(frozen=True)
class TaskInfo:
    name: str
    """The task's folder under ``benchmark_tasks`` (``task`` or ``task/subtask``)."""
    items: int
    """Single-label multiple-choice examples (one choice with the top score)."""
    choices: float
    """Median number of choices."""
    input_words: float
    """Median input length in words."""
    choice_words: float
    """Median length of an item's longest choice, in words."""
    english: float
    """Share of the inputs' letters that are ASCII."""
    letter_choices: bool
    """Most items' choices are single characters (option letters)."""
    keywords: tuple[str, ...]

    @property
    def family(self) -> str:
        return self.name.split("/")[0]


def _single_label(examples: list[dict]) -> list[dict]:
    out = []
    for ex in examples:
        scores = ex.get("target_scores") or {}
        if scores and sum(v == max(scores.values()) for v in scores.values()) == 1:
            out.append(ex)
    return out


def task_info(name: str, data: dict) -> TaskInfo | None:
    """The description of one task's ``task.json`` (None if it has no single-label multiple-choice item)."""
    items = _single_label(data.get("examples", []))
    if not items:
        return None
    letters = [c for ex in items for c in ex["input"] if c.isalpha()]
    return TaskInfo(
        name=name, items=len(items),
        choices=statistics.median(len(ex["target_scores"]) for ex in items),
        input_words=statistics.median(len(ex["input"].split()) for ex in items),
        choice_words=statistics.median(max(len(c.split()) for c in ex["target_scores"]) for ex in items),
        english=sum(c.isascii() for c in letters) / max(1, len(letters)),
        letter_choices=sum(all(len(c.strip()) <= 1 for c in ex["target_scores"]) for ex in items) > len(items) / 2,
        keywords=tuple(data.get("keywords", [])))


def _scan(archive: Path) -> list[TaskInfo]:
    infos = []
    with tarfile.open(archive) as tar:
        for member in tqdm(tar, desc="scan bigbench", unit=" files", leave=False):
            if not member.name.endswith("/task.json") or TASKS_DIR not in member.name:
                continue
            name = member.name.split(TASKS_DIR, 1)[1].removesuffix("/task.json")
            try:
                data = json.loads(tar.extractfile(member).read())
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # a few task files of the archive are not valid JSON; none is multiple choice
            info = task_info(name, data)
            if info is not None:
                infos.append(info)
    return sorted(infos, key=lambda i: i.name)


def list_multiple_choice(archive: str | Path | None = None) -> list[TaskInfo]:
    """Every multiple-choice task of the archive (scanned once per archive, then read from the cache)."""
    path = bigbench_archive(archive)
    stat = path.stat()
    cached = cache_root() / "bigbench" / f"mc-catalog-{stat.st_size}-{int(stat.st_mtime)}.json"
    if cached.is_file():
        return [TaskInfo(**{**row, "keywords": tuple(row["keywords"])}) for row in json.loads(cached.read_text())]
    infos = _scan(path)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps([asdict(i) for i in infos]))
    return infos


QA_SOURCES = {  # task -> what its reader gives, counted
    "disfl_qa": lambda archive: dict(zip(("paragraphs", "questions"), map(len, disfl_qa(archive=archive)))),
    "qa_wikidata": lambda archive: {"facts": len(qa_wikidata(archive=archive))},
    "truthful_qa": lambda archive: {"items": len(multiple_choice("truthful_qa", archive=archive))},
}
"""The archive's tasks read by the QA suite and the truthfulness check, counted by :func:`source_counts`."""


def source_counts(archive: str | Path | None = None) -> dict[str, dict[str, int]]:
    """How much each of :data:`QA_SOURCES` holds, as its reader sees it (tasks absent from the archive are left
    out): disfl_qa's paragraphs and answerable questions, qa_wikidata's facts, truthful_qa's single-label items."""
    counts = {}
    for name, count in QA_SOURCES.items():
        try:
            counts[name] = count(archive)
        except CorpusError:
            continue  # not in this archive
    return counts


def rejection(info: TaskInfo, rule: SelectionRule | None = None) -> str | None:
    """Why ``info`` fails the rule (the first failed check), or None for a candidate."""
    rule = rule or SelectionRule()
    keywords = set(info.keywords)
    checks = [
        (info.items >= rule.min_items, f"fewer than {rule.min_items} items"),
        (info.english >= rule.min_english and (not keywords & NON_ENGLISH or info.name.endswith("_en")),
         "not English"),
        (not info.letter_choices, "option letters as choices"),
        (not keywords & NON_LANGUAGE, "numbers or symbols"),
        (not keywords & MULTI_STEP, "multi-step reasoning"),
        (not keywords & BIAS_PROBE, "bias probe"),
        (info.input_words <= rule.max_input_words and info.choices <= rule.max_choices
         and info.choice_words <= rule.max_choice_words, "too long to score"),
    ]
    return next((reason for ok, reason in checks if not ok), None)


def candidates(infos: list[TaskInfo], rule: SelectionRule | None = None) -> list[TaskInfo]:
    return [i for i in infos if rejection(i, rule) is None]


def choose_nine(screened: list[dict], count: int = 9) -> list[str]:
    """The ``count`` screened tasks that pass (``"passes"``) with the largest ``"margin_low"`` (lower interval
    bound of accuracy above chance, by log-likelihood or PMI), at most one per task family."""
    chosen, families = [], set()
    for row in sorted((r for r in screened if r["passes"]), key=lambda r: -r["margin_low"]):
        family = row["task"].split("/")[0]
        if family not in families:
            chosen.append(row["task"])
            families.add(family)
    return chosen[:count]
