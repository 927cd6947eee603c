"""``python -m studies update-study CONFIG --out DIR``: the maintenance table on synthetic facts (issue 18).

Fictional people (:mod:`memory_mosaics.experiments.synthetic`) are split into the entities the run is built on, the
entities that arrive later (``batches`` updates), the entities among the first that are forgotten at the end, and
held-out entities that appear in no document (the chance level). The study

1. builds the run on the first entities' biographies (the project's pipeline) and scores QA on every group;
2. updates it with the arriving entities (``mlpmem update``, timed) and scores again;
3. retrains a run from scratch on all documents (datastore, kNN-LM sweep, teacher, memory, timed) and scores it;
4. asks ``explain`` about the correctly answered questions of the updated run: is the best document supporting the
   answer's first token one of the entity's own biographies?
5. forgets the chosen entities' documents (``mlpmem forget``) and scores again.

The forgotten and held-out entities are also asked in the words of a document (``<group>_document``,
:func:`~studies.update.groups.in_document_form`): the positions the forget teaches, beside the questions,
which no document position holds.

With ``update_variants`` other update recipes run on copies of the first run before step 2, and the report compares
each with the study's own update against the same retrained memory (:mod:`studies.update.variants`).
The first run is kept as it was before any update (``runs/first``), so that a later study with ``from_study`` can
try more recipes on it without building or retraining anything (:mod:`studies.update.sweep`), or, with
``from_study_table``, run steps 2, 4 and 5 on a copy of it against the finished study's retrained memory.

QA is scored two ways on the same questions, with the memory mixed at a fixed λ: multiple choice (the answer
against ``distractors`` other values of the attribute, by the mixed model's log-likelihood; chance is
``1 / (1 + distractors)``) and, with ``em``, the project's generated answers (exact match). The table's rows use
multiple choice; the report has both. Written to ``DIR``: ``report.md`` and ``results.json`` (one key per row).
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from memory_mosaics.experiments.synthetic import SyntheticConfig, generate
from mlpmem.config import Config, apply_override, from_dict, read_yaml
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.layout import stage_seconds
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.update import update_run
from mlpmem.pipeline import run_pipeline, run_stage
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.utils.io import write_jsonl
from mlpmem.utils.runtime import set_threads
from studies.update.groups import (
    DOCUMENT,
    DOCUMENT_FORM,
    entity_groups,
    entity_of,
    in_document_form,
    probes_of,
    questions_of,
    write_corpus,
)
from studies.update.report import seed_details, table_rows, variant_rows, without_answers, write_report
from studies.update.scoring import Scorer, own_document_rate
from studies.update.seeds import check_seeds, expand, retrain_at_seeds, retrained_step
from studies.update.sweep import finished_study, run_sweep
from studies.update.variants import FIRST, SCORED, after, check_variants, run_variants, step


@dataclass
class UpdateStudyConfig(Config):
    pipeline: str = "studies/qa/configs/qa-synthetic.yaml"
    """The pipeline preset of every run (its run_dir and corpus are set by the study)."""
    pipeline_set: list[str] = field(default_factory=list)
    """Overrides of the pipeline preset (``backbone.name=...``, ``train.epochs=...``)."""
    synthetic: dict = field(default_factory=lambda: {"num_entities": 120, "held_out_fraction": 0.2,
                                                     "paraphrases": 3, "seed": 0})
    """Options of the facts generator (:class:`~memory_mosaics.experiments.synthetic.SyntheticConfig`)."""
    arriving_fraction: float = 0.25
    """Share of the documented entities that arrive by ``update`` instead of being in the first run."""
    batches: int = 1
    """Updates the arriving entities are split into."""
    forget_fraction: float = 0.15
    """Share of the first run's entities whose documents are forgotten at the end."""
    forget_probes: bool = False
    """Give the forget probes (:mod:`mlpmem.maintenance.probes`): each forgotten entity's attributes asked in the
    scored prompt format but in a wording no scored question uses (:func:`.groups.probes_of`)."""
    questions: int = 80
    """Questions scored per group at most (four per entity)."""
    distractors: int = 7
    lam: float = 0.5
    """Memory weight of the mixed model in every QA score."""
    em: bool = True
    shots: int = 4
    """Format demonstrations before each generated answer (multiple choice takes none)."""
    max_new_tokens: int = 10
    explain_questions: int = 40
    maintenance: list[str] = field(default_factory=list)
    """Overrides of the maintenance settings (``update.epochs=3``)."""
    update_variants: dict[str, list[str]] = field(default_factory=dict)
    """Other update recipes, ``{name: [maintenance overrides after maintenance's]}``, each on a copy of the first
    run (:mod:`studies.update.variants`)."""
    from_study: str | None = None
    """A finished study's folder: run ``update_variants`` alone on its first run (``runs/first``), against its
    retrained memory (:mod:`studies.update.sweep`); the data settings must be the same."""
    from_study_table: bool = False
    """With ``from_study``: the whole table (this study's update, explain and forget, and any variants) on a copy of
    the finished study's first run, against its retrained memory; its first run's and retraining's seconds are
    the finished study's (measured there)."""
    update_seeds: list[int] = field(default_factory=list)
    """Maintenance seeds every update variant runs at (``<name>-seed<s>``); the report gives each recipe's mean and
    standard deviation over them (:mod:`studies.update.seeds`)."""
    retrain_seeds: list[int] = field(default_factory=list)
    """Training seeds (added to the run's ``train.seed``; not 0) the retrained memory is trained again at, on the
    retrained run's datastore and teacher: the retraining's own spread on the arriving entities, and every
    update's added entities against the mean of the retrained memories (:mod:`studies.update.seeds`)."""
    docs_dir: str | None = None
    """Also copy ``report.md`` and ``results.json`` here (e.g. ``docs/results/update``; the runs stay in ``--out``)."""
    seed: int = 0

    def validate(self) -> None:
        if not 0 < self.arriving_fraction < 1 or not 0 < self.forget_fraction < 1:
            raise ConfigError("update-study arriving_fraction and forget_fraction must be in (0, 1)")
        if self.batches < 1 or self.questions < 1 or self.distractors < 1 or self.explain_questions < 0:
            raise ConfigError("update-study batches, questions and distractors must be >= 1")
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"update-study lam must be in [0, 1], got {self.lam}")
        if self.from_study_table and self.from_study is None:
            raise ConfigError("update-study from_study_table needs from_study (the finished study whose first run and "
                              "retrained memory it reuses)")
        SyntheticConfig(**self.synthetic)
        check_variants(self.update_variants)
        check_seeds(self.update_seeds, self.retrain_seeds, self.update_variants)


def load_study_config(path: str | Path, overrides: list[str] | None = None) -> UpdateStudyConfig:
    raw = read_yaml(path)
    for item in overrides or []:
        apply_override(raw, item)
    return from_dict(UpdateStudyConfig, raw)


# -- the study


def pipeline_run(cfg: UpdateStudyConfig, folder: Path, corpus: Path, backbone, progress: bool,
                 extra: tuple[str, ...] = ()) -> Run:
    base = [f"run_dir={folder}", "corpus.name=null", f"corpus.path={corpus}", *cfg.pipeline_set]
    overrides = after(base, list(extra))
    return Run(PipelineConfig.from_yaml(cfg.pipeline, overrides), progress, backbone=backbone)  # one for all runs


def retrain(run: Run) -> float:
    """Seconds of every stage a from-scratch memory needs (datastore, kNN-LM sweep, teacher, training)."""
    t0 = time.perf_counter()
    for stage in ("datastore", "knnlm", "teacher", "train"):
        run_stage(run, stage)
    return time.perf_counter() - t0


class Study:
    """What every step of a study reads: the facts, the entity groups and their questions, one backbone for
    every run, the arriving documents' update and the scorer."""

    def __init__(self, cfg: UpdateStudyConfig, out: Path, progress: bool):
        self.cfg, self.out, self.progress = cfg, out, progress
        self.bench = generate(SyntheticConfig(**cfg.synthetic))
        self.groups = entity_groups(self.bench, cfg)
        self.questions = {g: questions_of(self.bench, ids, cfg.questions) for g, ids in self.groups.items()}
        for g in DOCUMENT_FORM:  # where the forget teaches: the answer positions of the documents themselves
            self.questions[f"{g}{DOCUMENT}"] = in_document_form(self.bench, self.questions[g])
        self._backbone = None
        self.source, self.earlier = finished_study(cfg) if cfg.from_study is not None else (None, None)

    def first_run(self) -> tuple[Run, Path, dict]:
        """The run to update (``<out>/runs/updated``), the corpus it was built from and its seconds: built here (and
        kept as it was in ``runs/first``, for later recipes), or with ``from_study`` a copy of that study's first
        run (its seconds measured there)."""
        if self.source is not None:
            corpus = self.source / "data" / "base"
            shutil.copytree(self.source / "runs" / FIRST, self.out / "runs" / "updated")
            first = self.earlier["details"]["timings"]["first_run_s"]
            return self.open_run(self.out / "runs" / "updated", corpus), corpus, {"first_run_s": first}
        corpus = write_corpus(self.bench, set(self.groups["old"]), self.out / "data" / "base")
        run = self.open_run(self.out / "runs" / "updated", corpus)
        t0 = time.perf_counter()
        run_pipeline(run)
        seconds = time.perf_counter() - t0
        shutil.copytree(run.dir, self.out / "runs" / FIRST)  # kept as it was, for later recipes (from_study)
        return run, corpus, {"first_run_s": seconds}

    def retrained(self, timings: dict) -> Run:
        """The memory retrained from scratch on every document (``timings`` gets its seconds): trained here, or
        with ``from_study`` that study's (read, not changed; its seconds measured there)."""
        if self.source is not None:
            timings.update({k: self.earlier["details"]["timings"][k] for k in ("retrain_s", "retrain_core_s")})
            return self.open_run(self.source / "runs" / "retrained", self.source / "data" / "all")
        everyone = set(self.groups["old"]) | set(self.groups["arriving"])
        scratch = self.open_run(self.out / "runs" / "retrained",
                                write_corpus(self.bench, everyone, self.out / "data" / "all"))
        timings["retrain_s"] = retrain(scratch)
        core = scratch.timings()  # the stages' own measurements (recorded when a stage takes over a second)
        timings["retrain_core_s"] = sum(stage_seconds(core.get(k)) or 0.0 for k in ("keys_train", "teacher", "train"))
        return scratch

    def retrained_again(self, scratch: Run, scorer: Scorer, scores: dict, timings: dict) -> None:
        """``retrain_seeds``: the memory of ``scratch`` trained again at each seed, scored on the arriving entities
        (``scores[retrained_step(seed)]``, its training's seconds in ``timings``)."""
        corpus, seed0 = Path(scratch.cfg.corpus.path), scratch.cfg.train.seed
        runs = retrain_at_seeds(scratch, self.cfg.retrain_seeds, self.out,
                                lambda folder, s: self.open_run(folder, corpus, (f"train.seed={seed0 + s}",)))
        for seed, (run, seconds) in runs.items():
            scores[retrained_step(seed)] = {"arriving": scorer.score(run, self.questions["arriving"])}
            timings[f"{retrained_step(seed)}_train_s"] = seconds

    def open_run(self, folder: Path, corpus: Path, extra: tuple[str, ...] = ()) -> Run:
        run = pipeline_run(self.cfg, folder, corpus, self._backbone, self.progress, extra)
        self._backbone = run.backbone
        return run

    def update(self, run: Run, maintenance) -> float:
        """Seconds to update ``run`` with the arriving entities' documents (``batches`` updates)."""
        return sum(_update_batches(self.bench, self.groups["arriving"], self.cfg, run, self.out, maintenance))

    def scorer(self, backbone) -> Scorer:
        return Scorer(self.bench, self.cfg, backbone)

    def variants(self, base_dir: Path, corpus: Path, scorer: Scorer, scores: dict) -> dict:
        """The config's ``update_variants``, each updating a copy of the first run in ``base_dir`` and scored on the
        groups of :data:`SCORED` (``scores[step(name)]``); their overrides and seconds by name."""
        variants = run_variants(expand(self.cfg.update_variants, self.cfg.update_seeds), self.cfg.maintenance,
                                base_dir, self.out, lambda folder: self.open_run(folder, corpus), self.update,
                                lambda run: {g: scorer.score(run, self.questions[g]) for g in SCORED})
        for name, variant in variants.items():
            scores[step(name)] = variant.pop("scores")
        return variants


def run_study(cfg: UpdateStudyConfig, out: Path, progress: bool = True) -> dict:
    """Every step of the module docstring (with ``from_study``, the variants alone:
    :mod:`studies.update.sweep`; with ``from_study_table`` too, every step but building the first run and
    retraining, which the finished study did); returns the results written to ``out/results.json``."""
    set_threads()
    if (out / "runs").exists():
        raise MlpmemError(f"{out} already holds a study (runs/): give another --out")
    study = Study(cfg, out, progress)
    if cfg.from_study is not None and not cfg.from_study_table:
        return run_sweep(cfg, out, study)
    groups, qs = study.groups, study.questions
    base, corpus, timings = study.first_run()
    scorer = study.scorer(base.backbone)
    maintenance = load_maintenance_config(overrides=cfg.maintenance)
    both = ("forgotten", "held_out", *(f"{g}{DOCUMENT}" for g in DOCUMENT_FORM))
    scores = {"before": {g: scorer.score(base, qs[g]) for g in ("old", "arriving", *both)}}
    variants = study.variants(base.dir, corpus, scorer, scores)
    timings["update_s"] = study.update(base, maintenance)
    scores["updated"] = {g: scorer.score(base, qs[g]) for g in ("old", "arriving", "kept", "forgotten",
                                                                f"forgotten{DOCUMENT}")}
    scratch = study.retrained(timings)
    scores["retrained"] = {g: scorer.score(scratch, qs[g]) for g in ("old", "arriving")}
    study.retrained_again(scratch, scorer, scores, timings)
    asked = qs["arriving"] + qs["old"]
    explained = own_document_rate(base, asked, {"correct": scores["updated"]["arriving"]["correct"] +
                                                 scores["updated"]["old"]["correct"]}, cfg.explain_questions)
    names = [d["id"] for d in study.bench.documents["train"] if entity_of(d) in set(groups["forgotten"])]
    probes = probes_of(study.bench, groups["forgotten"]) if cfg.forget_probes else None
    t0 = time.perf_counter()
    forget_run(base, names, maintenance, probes=probes)
    timings["forget_s"] = time.perf_counter() - t0
    scores["forgotten"] = {g: scorer.score(base, qs[g]) for g in ("kept", *both)}
    rows = variant_rows(scores, timings, variants)
    results = {**table_rows(scores, timings, explained, cfg),
               "details": {"config": cfg.to_dict(), "groups": {g: len(v) for g, v in groups.items()},
                           "from_study": study.source and str(study.source),
                           "timings": timings, "explain": explained, "scores": without_answers(scores),
                           "variants": rows, **seed_details(scores, rows)}}
    write_report(out, results)
    if cfg.docs_dir:
        write_report(Path(cfg.docs_dir), results)
    return results


def _update_batches(bench, arriving: list[str], cfg: UpdateStudyConfig, run: Run, out: Path, maintenance) -> list:
    seconds = []
    for b in range(cfg.batches):
        batch = set(arriving[b :: cfg.batches])
        path = out / "data" / f"update-{b + 1}.jsonl"
        write_jsonl(path, [d for d in bench.documents["train"] if entity_of(d) in batch])
        t0 = time.perf_counter()
        update_run(run, path, maintenance)
        seconds.append(time.perf_counter() - t0)
    return seconds


def cmd_update_study(args: argparse.Namespace) -> None:
    cfg = load_study_config(args.config, args.set)
    results = run_study(cfg, Path(args.out), progress=not args.quiet)
    for key, row in results.items():
        if key == "variants":  # a sweep (from_study)
            for name, v in row.items():
                print(f"{name}: added {_fmt(v['added'])} (>= 0.90), old kept {_fmt(v['old'])} (>= 0.95), "
                      f"wall time {_fmt(v['cost'])} (<= 0.25)")
        elif key != "details":
            print(f"{key}: {row['value']} (target {row['target']}) {'pass' if row['pass'] else 'FAIL'}")
    spread = results["details"].get("retrained_spread")
    if spread:
        print(f"retrained memory over {spread['n']} seeds: arriving {spread['mean']:.1f} % (sd {spread['sd']:.1f})")
    for name, r in results["details"].get("recipes", {}).items():
        print(f"{name} over seeds {r['seeds']}: added {_fmt(r['added']['mean'])}, old kept {_fmt(r['old']['mean'])}"
              + (f", added vs retrained mean {_fmt(r['added_vs_retrained_mean']['mean'])}"
                 if "added_vs_retrained_mean" in r else ""))
    print(f"report: {Path(args.out) / 'report.md'}" + (f" (and {cfg.docs_dir})" if cfg.docs_dir else ""))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
