"""``python -m studies tasks prepare``: the local lm-eval tasks of mlpmem, written from shipped data only.

Into ``out`` (default ``~/.cache/mlpmem/lm-eval-tasks``, or ``$MLPMEM_CACHE/lm-eval-tasks``), from data that
installs from the registries (:mod:`studies.tasks.installable`):

- the no-regression battery ``mlpmem_battery`` (HaluEval dialogue and summarization as reading choices, the
  analogy categories, the polarity items; ``battery_limit`` items per task) and HaluEval's hallucination detection
  ``mlpmem_halueval_detect`` (QA, dialogue, summarization; ``detect_limit`` items each), each scored by ``acc``
  (log-likelihood) and ``acc_mutual_info`` (domain-conditional PMI);
- closed-book preference ``mlpmem_halueval_prefer`` (``preference_data``: a ``halueval_qa`` benchmark's data folder):
  its test and held-out questions, the right answer against the hallucinated one, by ``acc`` and ``acc_norm``
  (length-normalised log-likelihood);
- the QA suite's generation tasks, the very questions ``python -m studies qa report`` asks (its config's benchmarks,
  seed, sizes, demonstrations and decoding length): ``mlpmem_<benchmark>`` (test questions) and
  ``mlpmem_<benchmark>_held_out``, each scored by SQuAD EM and F1; group ``mlpmem_qa``. A benchmark's questions
  come from the suite's own ``data/`` folder when it exists (the data its memory was trained with), else they are
  generated into ``out/qa-data/`` by the same functions;
- with a copy of the BIG-bench archive (``$MLPMEM_BIGBENCH_ARCHIVE``; PyPI no longer serves it), on request only:
  BIG-bench multiple-choice tasks ``mlpmem_bb_<task>`` (``mc_tasks``, group ``mlpmem_bigbench``), its TruthfulQA
  multiple choice (``truthfulness``, group ``mlpmem_truthfulness``) and ``qa_wikidata`` cloze facts;
- ``utils.py`` (the generation tasks' scoring hooks) and ``manifest.json`` (sources, sizes, files).

Then ``mlpmem lm-eval --include-path OUT --local-only --tasks mlpmem_battery,...`` scores any method on them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from memory_mosaics.experiments.bigbench import BIGBENCH_PIP_SPEC, qa_wikidata
from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.inference.prompts import DEMONSTRATIONS, QUESTION_TEMPLATE
from mlpmem.utils.io import cache_root, read_jsonl
from studies.qa.config import QASuiteConfig
from studies.qa.data import prepare_data, question_splits
from studies.tasks import choice_tasks, installable
from studies.tasks.choice_tasks import MC_GROUP, TRUTH_GROUP
from studies.tasks.installable import BATTERY_GROUP, DETECT_GROUP, PREFER_GROUP
from studies.tasks.writer import (
    MANIFEST,
    QA_DATA,
    choice_spec,
    generation_spec,
    reset_folder,
    write_group,
    write_manifest,
    write_task,
)

QA_GROUP = "mlpmem_qa"
QA_PROMPT = QUESTION_TEMPLATE.format(question="{{question}}")
UNTIL = ["Question:", "Context:"]
"""lm-eval's stop strings: only those that end an answer wherever they appear (see ``scoring``)."""


def tasks_root() -> Path:
    """The default task folder: ``lm-eval-tasks`` in the mlpmem cache."""
    return cache_root() / "lm-eval-tasks"


@dataclass
class TasksConfig(Config):
    out: str = ""
    """Task folder (empty: :func:`tasks_root`)."""
    mc_tasks: list[str] = field(default_factory=list)
    """BIG-bench multiple-choice tasks (``task`` or ``task/subtask``; the catalog's nine:
    :data:`studies.tasks.catalog.DEFAULT_NINE`)."""
    mc_limit: int = 200
    """Items per multiple-choice task (all of them if the task has fewer)."""
    truthfulness: list[str] = field(default_factory=list)
    """BIG-bench truthfulness tasks of ``mlpmem_truthfulness`` (e.g. ``truthful_qa``), every item of each."""
    qa_config: str | None = None
    """The QA suite whose questions become generation tasks (None: no QA tasks)."""
    qa_wikidata: int = 0
    """BIG-bench cloze facts of ``mlpmem_qa_wikidata`` (0: no such task)."""
    battery_limit: int = 200
    """Items per task of the installable battery ``mlpmem_battery`` (0: no battery)."""
    detect_limit: int = 1000
    """Items per task of HaluEval's detection ``mlpmem_halueval_detect`` (0: none)."""
    preference_data: str = ""
    """A ``halueval_qa`` benchmark's data folder (:mod:`studies.qa.halueval_qa`) whose test and held-out questions
    become ``mlpmem_halueval_prefer`` (empty: none)."""
    max_chars: int = 4000
    """The longest context (HaluEval knowledge or document) of an installable task; longer items are counted skips."""
    seed: int = 0
    """Seed of the multiple-choice and cloze subsets."""

    def validate(self) -> None:
        if not (self.mc_tasks or self.qa_config or self.truthfulness or self.battery_limit or self.detect_limit
                or self.preference_data):
            raise ConfigError("tasks prepare: nothing to write (no battery, detection, preference, qa_config or "
                              "BIG-bench tasks)")
        if self.mc_limit < 1 or self.qa_wikidata < 0 or self.battery_limit < 0 or self.detect_limit < 0:
            raise ConfigError("tasks prepare: mc_limit must be >= 1, qa_wikidata, battery_limit, detect_limit >= 0")
        if self.max_chars < 1:
            raise ConfigError(f"tasks prepare: max_chars must be >= 1, got {self.max_chars}")
        if len(set(self.mc_tasks + self.truthfulness)) != len(self.mc_tasks) + len(self.truthfulness):
            raise ConfigError(f"tasks prepare: a task is listed twice in mc_tasks {self.mc_tasks} and "
                              f"truthfulness {self.truthfulness}")

    @property
    def folder(self) -> Path:
        return Path(self.out) if self.out else tasks_root()


def write_choice_task(out: Path, task: str, items: list[dict], data: dict, **metadata) -> str:
    """One BIG-bench multiple-choice task ``mlpmem_bb_<task>`` in ``out``; its lm-eval name."""
    name = choice_tasks.task_name(task)
    delimiter = choice_tasks.answer_delimiter(data)
    write_task(out, name, choice_tasks.rows(items, data), choice_spec(delimiter),
               {"source": f"{BIGBENCH_PIP_SPEC} {task}", "premise": delimiter.strip(), **metadata})
    return name


def _choice_tasks(out: Path, group: str, tasks: list[str], limit: int | None, seed: int) -> dict:
    """The multiple-choice ``tasks`` (``limit`` items each; None: all) and their ``group``; ``{name: items}``."""
    sizes = {}
    for task in tasks:
        items, data = choice_tasks.eval_items(task, limit, seed)
        sizes[write_choice_task(out, task, items, data, seed=seed)] = len(items)
    if sizes:
        write_group(out, group, list(sizes), ["acc", "acc_mutual_info"])
    return sizes


def _qa_rows(questions: list[dict]) -> list[dict]:
    return [{"id": q["id"], "question": q["question"], "answers": list(q["answers"])} for q in questions]


def _benchmark_questions(suite: QASuiteConfig, name: str, out: Path) -> tuple[dict, str]:
    """The benchmark's question splits and the folder they were read from."""
    bench = suite.benchmarks[name]
    data = Path(suite.out_dir) / name / "data"
    if not (data / "meta.json").is_file():
        data = prepare_data(name, bench, out / QA_DATA / name, suite.seed)
    return question_splits(data, bench), str(data)


def _qa_tasks(cfg: TasksConfig, out: Path) -> tuple[dict, dict]:
    suite = QASuiteConfig.from_yaml(cfg.qa_config)
    shots = [{"question": q, "answers": [a]} for q, a in DEMONSTRATIONS[: suite.shots]]
    qa = generation_spec(QA_PROMPT, shots, UNTIL, suite.generation.max_new_tokens)
    sizes, sources = {}, {}
    for bench in suite.benchmarks:
        splits, sources[bench] = _benchmark_questions(suite, bench, out)
        for split, suffix in (("test", ""), ("held_out", "_held_out")):
            if splits.get(split):
                name = f"mlpmem_{bench}{suffix}"
                write_task(out, name, _qa_rows(splits[split]), qa, {"source": sources[bench], "split": split},
                           "process_qa")
                sizes[name] = len(splits[split])
    if cfg.qa_wikidata:
        cloze = generation_spec("{{question}}", [], UNTIL, suite.generation.max_new_tokens)
        facts = qa_wikidata(cfg.qa_wikidata, cfg.seed)
        write_task(out, "mlpmem_qa_wikidata", _qa_rows(facts), cloze,
                   {"source": f"{BIGBENCH_PIP_SPEC} qa_wikidata", "seed": cfg.seed}, "process_cloze")
        sizes["mlpmem_qa_wikidata"] = len(facts)
    if sizes:
        write_group(out, QA_GROUP, list(sizes), ["em", "f1"])
    return sizes, sources


def _installable(out: Path, group: str, tasks: list[installable.TaskRows], metric: str = "acc_mutual_info") -> dict:
    """Write ``tasks`` as multiple-choice tasks of ``group`` scored by ``acc`` and ``metric``; ``{name: items}``."""
    sizes = {}
    for task in tasks:
        write_task(out, task.name, task.rows, choice_spec(task.delimiter, metric),
                   {"source": task.source, "premise": task.delimiter.strip(), "skipped": task.skipped})
        sizes[task.name] = len(task.rows)
    if sizes:
        write_group(out, group, list(sizes), ["acc", metric])
    return sizes


def battery_tasks(cfg: TasksConfig) -> list[installable.TaskRows]:
    if not cfg.battery_limit:
        return []
    n, seed = cfg.battery_limit, cfg.seed
    return [installable.reading_task("dialogue", n, seed, cfg.max_chars),
            installable.reading_task("summarization", n, seed, cfg.max_chars),
            *installable.analogy_tasks(n, seed), installable.polarity_task(seed)]


def detection_tasks(cfg: TasksConfig) -> list[installable.TaskRows]:
    return [installable.detection_task(task, cfg.detect_limit, cfg.seed, cfg.max_chars)
            for task in ("qa", "dialogue", "summarization")] if cfg.detect_limit else []


def preference_tasks(cfg: TasksConfig) -> list[installable.TaskRows]:
    """Closed-book preference on the test questions (knowledge in the memory's corpus) and the held-out ones."""
    if not cfg.preference_data:
        return []
    folder = Path(cfg.preference_data) / "questions"
    return [installable.preference_task(split, read_jsonl(folder / f"{split}.jsonl"), cfg.seed)
            for split in ("test", "held_out") if (folder / f"{split}.jsonl").is_file()]


def prepared(cfg: TasksConfig) -> Path:
    """``cfg``'s folder, written by :func:`prepare_tasks` unless one finished from the same settings is there
    (its manifest is complete and records ``cfg``): an interrupted or otherwise written folder is written again."""
    path = cfg.folder / MANIFEST
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    if not (manifest.get("complete") and manifest.get("config") == json.loads(json.dumps(cfg.to_dict()))):
        prepare_tasks(cfg)
    return cfg.folder


def prepare_tasks(cfg: TasksConfig) -> dict:
    """Write every task of ``cfg`` into its folder; the manifest (also written there) as a dict."""
    out = reset_folder(cfg.folder)
    mc = _choice_tasks(out, MC_GROUP, cfg.mc_tasks, cfg.mc_limit, cfg.seed)
    truth = _choice_tasks(out, TRUTH_GROUP, cfg.truthfulness, None, cfg.seed)
    qa, sources = _qa_tasks(cfg, out) if cfg.qa_config else ({}, {})
    battery = _installable(out, BATTERY_GROUP, battery_tasks(cfg))
    detect = _installable(out, DETECT_GROUP, detection_tasks(cfg))
    prefer = _installable(out, PREFER_GROUP, preference_tasks(cfg), "acc_norm")
    groups = {MC_GROUP: list(mc), TRUTH_GROUP: list(truth), QA_GROUP: list(qa), BATTERY_GROUP: list(battery),
              DETECT_GROUP: list(detect), PREFER_GROUP: list(prefer)}
    items = {**mc, **truth, **qa, **battery, **detect, **prefer}
    info = {"folder": str(out.resolve()), "groups": groups, "items": items, "config": cfg.to_dict(),
            "qa_sources": sources}
    write_manifest(out, info)
    return info
