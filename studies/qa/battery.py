"""The no-regression battery through lm-evaluation-harness, as a stage of the QA suite.

Every method of ``battery.methods`` is scored by lm-eval (the ``mlpmem`` model type,
:mod:`mlpmem.evaluation.harness`) on the local multiple-choice tasks ``python -m studies tasks prepare`` writes (the
installable battery, HaluEval's detection and closed-book preference; :mod:`studies.tasks.prepare`), every item
logged, on the models of the benchmark ``no_regression.memory_from``: its memory run (memory, datastore, corpus),
the CPT / LoRA weights the suite saved, the memory and kNN-LM at the λ the run chose on validation perplexity
(:func:`run_lambda`), the gate at the offset the suite chose on that benchmark's validation questions. Each
method's lm-eval results go to ``<out_dir>/battery/<method>.json``; a method whose file already holds every task
asked, scored from the same model args, task settings and memory weights, is not run again, so the stage resumes
and a call that asks for fewer tasks (a costly method on the hallucination tasks alone) reuses the other methods'
files; the report reads only the tasks asked (:func:`battery_results`). The
tasks are written once into ``<out_dir>/battery/tasks`` (unless ``tasks_dir`` names a prepared folder). The
report pairs each method with the backbone item by item (:mod:`mlpmem.evaluation.compare`).

With ``one_pass`` (the default) the methods that only read the memory run's backbone pass (backbone, memory,
memory-gate, kNN-LM) are scored together, one backbone pass per request for all of them
(:mod:`mlpmem.evaluation.one_pass`; the same scores as one method at a time, to float rounding); the first of them
then carries the wall time of all, recorded in its file. ``precision: bf16`` scores every method under bf16
autocast (paired differences then compare two bf16 scorings); the suite resolves ``auto`` before this stage
(:func:`studies.qa.suite.machine_precision`), so every file names the precision it was scored at.
"""

from __future__ import annotations

import time
from pathlib import Path

from mlpmem.baselines.methods import METHODS, knnlm_chosen, run_results
from mlpmem.errors import ConfigError
from mlpmem.evaluation.compare import load_results
from mlpmem.pipeline.records import memory_sha256
from mlpmem.utils.shards import read_json
from studies.tasks.prepare import TasksConfig, prepared

SCORED_WITH = "mlpmem_scored_with"
"""The key of a battery file that records what it was scored from (:func:`_scored_with`)."""
WALL_SECONDS = "mlpmem_wall_seconds"
"""The key of a battery file that records how long lm-eval took to score it."""
ONE_PASS = "mlpmem_one_pass"
"""The key of a battery file that lists the methods scored with it from one backbone pass (absent: alone)."""
RAG_CONTEXTS = "mlpmem_rag_contexts"
"""The key of a RAG battery file that counts its contexts and those that got no passage."""
ONE_PASS_LABELS = ("backbone", "memory", "memory-gate", "knnlm")
def battery_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "battery"


def model_args(cfg, method: str) -> str:
    """lm-eval ``model_args`` of ``method`` on the models of ``no_regression.memory_from`` (suite config ``cfg``), at
    ``battery.precision``."""
    return f"{_method_args(cfg, method)},precision={cfg.battery.precision if cfg.battery else 'fp32'}"


def _method_args(cfg, method: str) -> str:
    bench = Path(cfg.out_dir) / cfg.no_regression.memory_from
    run = f"run={bench / 'memory-run'}"
    tuned = _tuned(bench, method) if method == "memory-gate" else {}
    if method in ("memory", "knnlm"):  # at the λ the run chose on validation perplexity (see run_lambda)
        return f"{run},method={method},lam={run_lambda(bench / 'memory-run', method)}"
    if method == "memory-gate":  # the gate the suite scored and chose the offset for
        where = f",gate_dir={_question_gate(bench, tuned)}" if tuned.get("gate_training") == "questions" else ""
        floor = f",gate_floor={tuned['gate_floor']}" if tuned.get("gate_floor") else ""
        return f"{run},gate=true,gate_offset={tuned.get('gate_offset', 0.0)}{floor}{where}"
    if method in ("cpt", "lora"):
        return f"{run},method={method},weights={bench / 'weights' / method}"
    if method.startswith("rag-"):
        rag = cfg.rag
        return (f"{run},method={method},docs={bench / 'data' / 'corpus' / 'train.jsonl'},top_k={rag.top_k},"
                f"passage_words={rag.passage_words},max_prompt_tokens={rag.max_prompt_tokens}")
    return f"{run},method=backbone"


def run_lambda(run_dir: Path, method: str) -> float:
    """The λ of the memory (or kNN-LM) that the memory run chose on its validation perplexity, read where
    :func:`~mlpmem.baselines.methods.build_method` reads it when given none: the mixture a user gets. The battery
    scores the mixtures there, not at the λ the suite tunes on the validation questions for answer generation:
    where that is 0 (no help in generating answers), the battery would score the backbone again."""
    return run_results(run_dir)["lambda"] if method == "memory" else knnlm_chosen(run_dir)["lambda"]


def _scored_with(cfg, method: str) -> dict:
    """What a battery file of ``method`` was scored from: its lm-eval model args, the settings its task folder is
    written from and, for the memory methods, the
    checksum of the memory weights and of the question gate (a file scored from others is scored again: a gate
    retrained in the same folder keeps its model args)."""
    b = cfg.battery
    tasks = {k: getattr(b, k) for k in ("tasks_dir", "battery_limit", "detect_limit", "mc_tasks", "mc_limit",
                                        "truthfulness")}  # what the task folder is written from
    out = {"model_args": model_args(cfg, method), "tasks": b.tasks, "limit": b.limit,
           "task_settings": {**tasks, "seed": cfg.seed}}
    bench = Path(cfg.out_dir) / cfg.no_regression.memory_from
    if METHODS[method].reads_memory:
        out["memory_sha256"] = memory_sha256(bench / "memory-run" / "memory")
    gate = _tuned(bench, method).get("question_gate") if method == "memory-gate" else None
    if gate:
        out["gate_sha256"] = gate["weights_sha256"]
    return out


def _question_gate(bench: Path, scored: dict) -> Path:
    """The folder of the question gate memory-gate was scored with; refused when another one replaced it since."""
    folder = bench / "gate-questions"
    path = folder / "gate.json"
    held = read_json(path, "question gate")["weights_sha256"] if path.is_file() else None
    if held != scored.get("question_gate", {}).get("weights_sha256"):
        raise ConfigError(f"battery: the gate in {folder} is not the one memory-gate was scored with on {bench.name}: "
                          f"delete {bench / 'methods' / 'memory-gate.json'} and rerun the suite")
    return folder


def _tuned(bench: Path, method: str) -> dict:
    path = bench / "methods" / f"{method}.json"
    if not path.is_file():
        raise ConfigError(f"battery: {path} is missing: the QA suite must score {method} on {bench.name} first "
                          "(its λ is chosen there)")
    return read_json(path, f"{method} results")


def tasks_folder(cfg) -> Path:
    """The prepared task folder: ``battery.tasks_dir``, or one the suite writes once under its battery folder."""
    return Path(cfg.battery.tasks_dir) if cfg.battery.tasks_dir else prepared(tasks_config(cfg))


def tasks_config(cfg) -> TasksConfig:
    """The tasks the suite writes for its battery (``battery.tasks_dir`` empty): the battery's sizes, the suite's
    seed, closed-book preference from ``no_regression.memory_from``'s questions when it is ``halueval_qa``."""
    b, source = cfg.battery, cfg.no_regression.memory_from
    preference = str(Path(cfg.out_dir) / source / "data") if source == "halueval_qa" else ""
    return TasksConfig(out=str(battery_dir(cfg.out_dir) / "tasks"), qa_config=None, seed=cfg.seed,
                       battery_limit=b.battery_limit, detect_limit=b.detect_limit, preference_data=preference,
                       mc_tasks=list(b.mc_tasks), mc_limit=b.mc_limit, truthfulness=list(b.truthfulness))


def run_battery(cfg, progress: bool = True) -> dict:
    """Score every method not yet scored; ``{"tasks_dir", "methods": {method: results file}}`` of what exists."""
    from mlpmem.evaluation.harness import evaluate, write_results

    missing = set(cfg.battery.methods) - set(cfg.methods)
    if missing:
        raise ConfigError(f"battery.methods {sorted(missing)} are not among the suite's methods {cfg.methods} "
                          "(their λ and weights come from the suite)")
    folder = tasks_folder(cfg)
    todo = {}
    for method in cfg.battery.methods:
        path, scored_with = battery_dir(cfg.out_dir) / f"{method}.json", _scored_with(cfg, method)
        if not (path.is_file() and covers(read_json(path, f"battery {method}"), scored_with)):
            todo[method] = scored_with
    models = _one_pass_models(cfg, todo)
    for method, scored_with in todo.items():
        t0 = time.perf_counter()
        model = models.get(method) or _model(cfg, method, scored_with["model_args"])
        results = evaluate(cfg.battery.tasks, model, scored_with["model_args"],
                           include_path=folder, local_only=True, limit=cfg.battery.limit,
                           batch_size=cfg.battery.batch_size, log_samples=True)
        shared = {ONE_PASS: list(models)} if method in models else {}
        counts = {RAG_CONTEXTS: model.rag_context_counts()} if method.startswith("rag-") else {}
        write_results({**results, SCORED_WITH: scored_with, WALL_SECONDS: time.perf_counter() - t0, **shared,
                       **counts}, battery_dir(cfg.out_dir) / f"{method}.json")
    return collect_battery(cfg, folder)


def leaf_tasks(record: dict, tasks: list[str]) -> list[str]:
    """``tasks`` (task or group names) as the tasks they are made of, each group expanded by the ``group_subtasks``
    that lm-eval recorded in ``record`` (a battery file)."""
    groups = record.get("group_subtasks") or {}
    return [leaf for t in tasks for leaf in (leaf_tasks(record, groups[t]) if t in groups else [t])]


def covers(record: dict, scored_with: dict) -> bool:
    """Whether a battery file was scored as ``scored_with`` asks (model args, task settings, memory weights) on
    every task it asks for, or on more."""
    def settings(d: dict) -> dict:
        return {k: v for k, v in d.items() if k != "tasks"}

    held = record.get(SCORED_WITH)
    return (isinstance(held, dict) and settings(held) == settings(scored_with)
            and set(leaf_tasks(record, scored_with["tasks"])) <= set(record.get("samples") or {}))


def battery_results(stage: dict, method: str) -> dict:
    """``method``'s lm-eval results from the battery ``stage`` (:func:`collect_battery`'s), its samples, scores and
    task configs restricted to the tasks the suite asked (``stage["tasks"]``; None: every task the file holds)."""
    results = load_results(stage["methods"][method])
    asked = stage.get("tasks")
    if asked is None:
        return results
    return {**results, **{key: {t: v for t, v in (results.get(key) or {}).items() if t in asked}
                          for key in ("samples", "results", "configs")}}


def _model(cfg, method: str, model_args: str):
    """The ``mlpmem`` model type by name, or (RAG) built here, so that its contexts' counts can be read after."""
    if not method.startswith("rag-"):
        return "mlpmem"
    from lm_eval.utils import simple_parse_args_string  # here: lm-eval loads only for the stage

    from mlpmem.evaluation.harness import MlpmemLM

    return MlpmemLM(**simple_parse_args_string(model_args), batch_size=cfg.battery.batch_size)


def _one_pass_models(cfg, todo: dict) -> dict:
    """``{method: OnePassLM}`` of the methods of ``todo`` that share one backbone pass (none: fewer than two)."""
    labels = [m for m in todo if m in ONE_PASS_LABELS]
    if not cfg.battery.one_pass or len(labels) < 2:
        return {}
    from mlpmem.evaluation.one_pass import OnePass  # here: it loads lm-eval

    return OnePass({m: todo[m]["model_args"] for m in labels}).models(cfg.battery.batch_size)


def collect_battery(cfg, folder: Path | None = None) -> dict | None:
    """What earlier runs of the stage left for the suite's ``battery.methods`` (None when the backbone was not
    scored, or the suite has no battery)."""
    if cfg.battery is None:
        return None
    out = battery_dir(cfg.out_dir)
    files = {m: str(out / f"{m}.json") for m in cfg.battery.methods if (out / f"{m}.json").is_file()}
    if "backbone" not in files:
        return None
    records = {m: read_json(Path(f), f"battery {m}") for m, f in files.items()}
    asked = leaf_tasks(records["backbone"], cfg.battery.tasks)
    return {"tasks_dir": str(folder or out / "tasks"), "methods": files, "tasks": asked,
            "more_tasks": [m for m, r in records.items() if set(r.get("samples") or {}) - set(asked)],
            "wall_seconds": {m: r[WALL_SECONDS] for m, r in records.items()},
            "one_pass": [m for m, r in records.items() if r.get(ONE_PASS)],
            "precision": {m: scored_precision(r) for m, r in records.items()},
            "rag_contexts": {m: r[RAG_CONTEXTS] for m, r in records.items() if r.get(RAG_CONTEXTS)}}


def scored_precision(record: dict) -> str:
    """The precision a battery file was scored at, from its model args (fp32 unless they name another)."""
    args = dict(a.split("=", 1) for a in (record.get(SCORED_WITH) or {}).get("model_args", "").split(",") if "=" in a)
    return args.get("precision", "fp32")
