"""One QA benchmark: its data, its memory run, then every method on the same questions, each saved when done.

Under ``out_dir/<benchmark>/``: ``data/`` (:mod:`studies.qa.data`), ``memory-run/`` (the project's
pipeline on the benchmark's corpus, from its pipeline YAML) and ``methods/<method>.json``: EM / F1 of each
method (:data:`~mlpmem.baselines.methods.METHODS`) on the test (and held-out) questions with every question's
EM / F1 by id (``per_item``, :mod:`studies.qa.per_item`, for the report's paired intervals) and a
sample of the predictions, its cost, and for the models of ``no_regression.memory_from`` the no-regression
battery (with its per-item correctness). Mixing methods get λ tuned here, on the
validation questions. A method whose file exists is not run again, so an interrupted suite resumes where it
stopped, unless the file records other settings than the suite's (:func:`method_settings`, which include the
checksum of the memory the memory methods read): then it is scored again. When the benchmark's pipeline config now
trains the memory otherwise than the run's record says, the memory is trained again on the same datastore and
teacher (:meth:`Context.memory_results`), and so its methods are scored again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from memory_mosaics.experiments.synthetic import SyntheticConfig, chance_accuracy, generate
from mlpmem.baselines.finetuned import save_finetuned
from mlpmem.baselines.methods import METHODS, Built, MethodOptions, build_method
from mlpmem.inference.gate_io import saved_for
from mlpmem.inference.mixing import check_lambda
from mlpmem.pipeline import built as stage_built
from mlpmem.pipeline import records, run_pipeline, run_stage
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.gate import gate_with_report, load_run_memory
from mlpmem.pipeline.run import Run
from mlpmem.utils.io import read_jsonl
from mlpmem.utils.shards import read_json, write_json
from studies.qa.config import QASuiteConfig
from studies.qa.data import prepare_data, question_splits
from studies.qa.eval_qa import evaluate_questions, tune_lambda
from studies.qa.gate_negatives import gate_negatives
from studies.qa.no_regression import no_regression, no_regression_items
from studies.qa.per_item import PER_ITEM, qa_per_item
from studies.qa.question_gate import openness, question_gate

SAMPLE_PREDICTIONS = 20
"""Predictions kept per split in a method's file, for the report's reader."""
FINETUNED = ("cpt", "lora")
GATE_SETTINGS = ("gate_offset_grid", "gate_offset_rule", "gate_floor_grid", "gate_floor_rule", "gate_training",
                 "gate_negatives", "gate_negative_tasks", "gate_negatives_unconditional")
"""The suite's settings the memory-gate method's file depends on (its offset and floor are chosen under them)."""
"""Methods whose fine-tuned weights the suite saves under ``<benchmark>/weights/<method>``."""


class Context:
    """What every method of one benchmark shares: backbone, memory run, corpus, questions, config."""

    def __init__(self, cfg: QASuiteConfig, name: str, backbone, progress: bool = True):
        self.cfg, self.name, self.progress = cfg, name, progress
        self.bench = cfg.benchmarks[name]
        self.dir = Path(cfg.out_dir) / name
        self.data = prepare_data(name, self.bench, self.dir / "data", cfg.seed)
        pcfg = PipelineConfig.from_yaml(self.bench.pipeline, [f"run_dir={self.dir / 'memory-run'}",
                                                              f"corpus.path={self.data / 'corpus'}",
                                                              "corpus.name=null", *self.bench.pipeline_set])
        self.run = Run(pcfg, progress, backbone=backbone)
        self.backbone = backbone
        self.model, self.tokenizer = backbone
        self.docs = read_jsonl(self.data / "corpus" / "train.jsonl")
        self.questions = question_splits(self.data, self.bench)
        # mixing methods are built at λ = 0 and tuned on the validation questions
        self.options = MethodOptions(lam=0.0, docs=self.docs, shots=cfg.shots, rag=cfg.rag, cpt=cfg.cpt,
                                     lora=cfg.lora, progress=progress)

    def memory_results(self) -> dict:
        """The memory run's results, running the pipeline first if it has not finished. A memory trained under
        other ``memory`` / ``train`` settings than the pipeline config gives now is trained again (the datastore
        and teacher kept; one built otherwise is refused, as by ``mlpmem run``)."""
        run, path = self.run, self.run.path("results.json")
        if records.read_record(run, "train") is not None and not records.is_current(run, "train"):
            print(f"[qa] {self.name}: the memory was trained under other settings: training it again", flush=True)
            run_stage(run, "train", rebuild=True)
        if not path.exists() or not stage_built(run, "train") or not records.results_match_memory(run):
            run_pipeline(run)
        return read_json(path, "memory run results")


def method_file(bench_dir: Path, method: str) -> Path:
    """``methods/<method>.json``: where the suite keeps ``method``'s results on one benchmark."""
    return bench_dir / "methods" / f"{method}.json"


def method_settings(cfg: QASuiteConfig, bench: str, method: str, memory_sha256: str | None = None) -> dict:
    """The suite's settings that ``method``'s file on ``bench`` depends on (besides the benchmark's data, which
    has its own checks), as JSON would read them back: recorded in the file, and a file recorded under others is
    scored again. ``memory_sha256``: the checksum of the run's memory, a setting of the methods that read the memory."""
    tuned = METHODS[method].mixes or method == "memory-gate"  # chosen on the validation questions
    benchmark = {k: v for k, v in asdict(cfg.benchmarks[bench]).items() if tuned or k != "tune_questions"}
    settings = {"benchmark": benchmark, "seed": cfg.seed, "shots": cfg.shots, "generation": asdict(cfg.generation)}
    if METHODS[method].mixes:
        settings["lambda_grid"] = cfg.lambda_grid
    if method == "memory-gate":
        settings["gate"] = {key: getattr(cfg, key) for key in GATE_SETTINGS}
    if METHODS[method].reads_memory and memory_sha256 is not None:
        settings["memory"] = memory_sha256
    if method.startswith("rag"):
        settings["rag"] = asdict(cfg.rag)
    if method in FINETUNED:
        settings[method] = asdict(getattr(cfg, method))
    if bench == cfg.no_regression.memory_from and method in cfg.no_regression.methods:
        settings["no_regression"] = {k: v for k, v in asdict(cfg.no_regression).items() if k != "methods"}
    return json.loads(json.dumps(settings))


def changed_settings(result: dict, settings: dict) -> list[str]:
    """The settings (top-level names) a method's stored ``result`` was computed under otherwise (a result that
    records none differs in all of them)."""
    stored = result.get("settings", {})
    return sorted(k for k in {*stored, *settings} if stored.get(k) != settings.get(k))


def _evaluate_splits(ctx: Context, model, prompt_fn, splits=("test", "held_out")) -> dict:
    out = {}
    for split in splits:
        if split in ctx.questions:
            r = evaluate_questions(model, ctx.tokenizer, ctx.questions[split], prompt_fn, ctx.cfg.generation)
            out[split] = {k: r[k] for k in ("em", "f1", "n", "seconds")}
            out[split][PER_ITEM] = qa_per_item(r["predictions"])  # every question, by id
            out[split]["predictions"] = r["predictions"][:SAMPLE_PREDICTIONS]
    return out


def _at_lambda(model, lam: float):
    """A mixing wrapper (kNN-LM or memory) set to weight ``lam``: both read ``lam`` at every forward."""
    model.lam = check_lambda(lam, "lam")
    return model


def _tuned(ctx: Context, built: Built) -> dict:
    make = lambda lam: _at_lambda(built.model, lam)  # noqa: E731
    lam, curve = tune_lambda(make, ctx.tokenizer, ctx.questions["validation"], ctx.cfg.lambda_grid,
                             built.prompts, ctx.cfg.generation)
    return {"lambda": lam, "validation_curve": curve, **_evaluate_splits(ctx, make(lam), built.prompts)}


def ensure_gate(ctx: Context) -> dict:
    """The memory run's learned gate, trained (on the run's validation text, never its test) if it is not there;
    returns the gate's perplexity comparison on the run's test text."""
    path = ctx.run.layout.gate / "results.json"
    if not (path.exists() and saved_for(ctx.run.layout.gate, load_run_memory(ctx.run))):
        gate_with_report(ctx.run, ctx.name, f"python -m studies qa report ({ctx.name}: memory-gate)")
    entry = read_json(path, "gate results")["corpora"][ctx.name]
    return {k: entry[k] for k in ("ppl_fixed", "ppl_gate", "mean_gate", "lambda_fixed")}


def _gate_tuned(ctx: Context, built: Built) -> dict:
    """The gate's logit offset and floor: each the one of its grid, or the one of several chosen on the validation
    questions (as λ is; the offset first, then the floor at it), then the test."""
    gate, tuned = built.model.gate, {}
    cfg = ctx.cfg  # each knob prefers the more closed gate: the smaller offset, the larger floor
    offset = _gate_knob(ctx, built, cfg.gate_offset_grid, gate.set_offset, "offset", cfg.gate_offset_rule, "smaller",
                        tuned)
    gate.set_offset(offset)
    floor = _gate_knob(ctx, built, cfg.gate_floor_grid, gate.set_floor, "floor", cfg.gate_floor_rule, "larger", tuned)
    gate.set_floor(floor)
    out = {"gate_offset": offset, "gate_floor": floor, **tuned, **_evaluate_splits(ctx, built.model, built.prompts)}
    if ctx.cfg.gate_training == "questions":
        opened = _openness(ctx, built)
        out["gate_mean_lambda"] = opened["mean"]
        if floor:
            out["gate_closed_fraction"] = opened["closed"]
    return out


def _gate_knob(ctx: Context, built: Built, grid: list[float], setter, key: str, rule: str, prefer: str,
               tuned: dict) -> float:
    """One value of a gate's ``grid`` (``setter`` sets it): the only one, or the one chosen on the validation
    questions by ``rule`` and ``prefer`` (:func:`tune_lambda`); its curve goes to ``tuned["gate_<key>_curve"]``."""
    if len(grid) == 1:
        return grid[0]
    make = lambda value: (setter(value), built.model)[1]  # noqa: E731
    value, tuned[f"gate_{key}_curve"] = tune_lambda(make, ctx.tokenizer, ctx.questions["validation"], grid,
                                                    built.prompts, ctx.cfg.generation, key=key,
                                                    rule=rule, prefer=prefer)
    return value


def _openness(ctx: Context, built: Built) -> dict[str, dict]:
    """Where the question gate opens at its chosen offset and floor (:func:`openness`) on the answers of the
    validation questions and on its negatives, in their prompts and (those with their own prompt) as PMI's
    unconditional terms."""
    negatives = gate_negatives(ctx.cfg, twins=True)  # PMI's unconditional terms, whether the gate trained on them
    groups = {"questions": ctx.questions["validation"], "negatives": [q for q in negatives if not q.get("after_bos")],
              "unconditional": [q for q in negatives if q.get("after_bos")]}
    return openness(built.model, ctx.tokenizer, groups, built.prompts)


def _train_on_questions(ctx: Context, built: Built) -> dict:
    """Replace the memory-gate model's gate by one trained on the validation questions, starting from the λ the
    fixed-λ memory chose on them (the run's λ when that method has not been scored)."""
    memory_file = method_file(ctx.dir, "memory")
    lam = read_json(memory_file, "memory results")["lambda"] if memory_file.exists() else built.info["lambda_fixed"]
    questions = ctx.questions["validation"] + gate_negatives(ctx.cfg)
    gate, summary = question_gate(ctx.dir / "gate-questions", built.model, ctx.tokenizer, questions, built.prompts,
                                  ctx.run.cfg.gate, lam)
    built.model.set_gate(gate)
    weights = read_json(ctx.dir / "gate-questions" / "gate.json", "question gate")["weights_sha256"]
    return {"gate_training": "questions", "question_gate": {**summary, "weights_sha256": weights}}


def run_method(ctx: Context, name: str) -> tuple[Built, dict]:
    """One method built from the benchmark's memory run and scored: ``(built, result)``."""
    gate = ensure_gate(ctx) if name == "memory-gate" else {}
    built = build_method(name, ctx.run.dir, ctx.backbone, ctx.options)
    if name in FINETUNED:  # kept for lm-eval's method=cpt|lora (weights=<bench>/weights/<method>)
        save_finetuned(built, ctx.dir / "weights" / name, ctx.tokenizer)
    if gate:
        built.info["gate_text_ppl"] = gate
        if ctx.cfg.gate_training == "questions":
            built.info.update(_train_on_questions(ctx, built))
    if METHODS[name].mixes:
        scores = _tuned(ctx, built)
    elif gate:
        scores = _gate_tuned(ctx, built)
    else:
        scores = _evaluate_splits(ctx, built.model, built.prompts)
    return built, {**built.info, **scores, **built.cost}


def run_benchmark(cfg: QASuiteConfig, name: str, backbone, progress: bool = True) -> dict:
    ctx = Context(cfg, name, backbone, progress)
    memory_results = ctx.memory_results()
    nr_items = no_regression_items(cfg.no_regression, cfg.seed) if name == cfg.no_regression.memory_from else None
    out = {"memory_run": memory_results, "questions": {k: len(v) for k, v in ctx.questions.items()}, "methods": {}}
    for method in cfg.methods:
        settings = method_settings(cfg, name, method, records.memory_sha256(ctx.run.layout.memory))
        path = method_file(ctx.dir, method)
        if path.exists():
            stored = read_json(path, f"{method} results")
            changed = changed_settings(stored, settings)
            if not changed:
                out["methods"][method] = stored
                continue
            print(f"[qa] {name}: {method} was scored under other {', '.join(changed)}: scoring it again", flush=True)
        print(f"[qa] {name}: {method}", flush=True)
        t0 = time.perf_counter()
        built, result = run_method(ctx, method)
        if nr_items and method in cfg.no_regression.methods:
            result["no_regression"] = no_regression(built.model, ctx.tokenizer, nr_items, cfg.generation)
        result["wall_seconds"] = time.perf_counter() - t0
        result["settings"] = settings
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, result)
        out["methods"][method] = result
        del built
    _add_chance(cfg, name, out)
    return out


def collect_benchmark(cfg: QASuiteConfig, name: str) -> dict | None:
    """What an earlier (possibly interrupted) suite finished for one benchmark, without computing anything."""
    bench_dir = Path(cfg.out_dir) / name
    memory = bench_dir / "memory-run" / "results.json"
    if not memory.exists():
        return None
    out = {"memory_run": read_json(memory, "memory run results"), "methods": {},
           "questions": {k: len(v) for k, v in question_splits(bench_dir / "data", cfg.benchmarks[name]).items()}}
    for method in cfg.methods:
        path = method_file(bench_dir, method)
        if path.exists():
            out["methods"][method] = read_json(path, f"{method} results")
    _add_chance(cfg, name, out)
    return out


def _add_chance(cfg: QASuiteConfig, name: str, out: dict) -> None:
    if name == "synthetic":
        out["chance_em_held_out"] = 100 * chance_accuracy(generate(SyntheticConfig(**cfg.benchmarks[name].options)))
