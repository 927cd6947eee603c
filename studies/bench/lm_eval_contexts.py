"""``python -m studies bench lm-eval``: multiple-choice scoring with shared contexts vs lm-eval's own path, in one run.

Each method of a finished run is loaded once as the ``mlpmem`` lm-eval model type and scores the same local tasks
(``python -m studies tasks prepare``'s installable battery, ``limit`` items per task) twice per round: with
``share_context`` (each context runs once, :mod:`mlpmem.evaluation.shared_context`) and with ``HFLM``'s path,
interleaved round by round. Reported per method: the wall and CPU seconds, the ratio of medians, and the agreement
of the two: the largest difference of any request's log-likelihood, whether every greedy flag and every task's
accuracy and PMI accuracy are equal. Then, with ``one_pass`` and two or more of backbone, memory and kNN-LM among
the methods, those methods from one backbone pass vs one at a time (:mod:`studies.bench.lm_eval_one_pass`).
With ``compare_precision`` only those methods' one pass, at fp32 and at that precision
(:mod:`studies.bench.lm_eval_precision`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lm_eval import simple_evaluate

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import MlpmemLM, task_manager
from mlpmem.evaluation.methods import METHODS
from mlpmem.reporting.tables import markdown_table
from studies.bench.common import interleave, summarize, threads, write_text
from studies.bench.lm_eval_one_pass import measure_one_pass, one_pass_labels, one_pass_report
from studies.bench.lm_eval_precision import measure_precision, precision_report
from studies.tasks.installable import BATTERY_GROUP
from studies.tasks.prepare import TasksConfig, prepared

SHARED, PLAIN = "shared contexts", "HFLM"
CACHING = METHODS
"""The methods whose models keep a KV cache (every method of a run)."""


@dataclass
class LmEvalBenchConfig(Config):
    run: str = "runs/quick"
    """A finished run (its memory, datastore and corpus serve every method)."""
    methods: list[str] = field(default_factory=lambda: ["backbone", "memory", "rag-bm25"])
    tasks_dir: str = ""
    """A folder ``python -m studies tasks prepare`` wrote; empty: one is written into ``out_dir/tasks``."""
    tasks: list[str] = field(default_factory=lambda: [BATTERY_GROUP])
    limit: int = 20
    """Items per task."""
    batch_size: int = 8
    repeats: int = 1
    warmup: int = 0
    threads: int | None = None
    one_pass: bool = True
    """Also time backbone, memory and kNN-LM (those of ``methods``) from one backbone pass vs one at a time."""
    per_method: bool = True
    """Time each method's shared contexts vs HFLM's path (False: only the one-pass comparison)."""
    compare_precision: str | None = None
    """``bf16`` (or ``auto``): only the one-pass methods at fp32 vs at this precision, speed and scores."""
    profile: bool = False
    """With ``compare_precision``: one more round at each precision under ``torch.profiler``, its operators'
    self CPU time side by side in the report (:mod:`studies.bench.op_profile`)."""
    out_dir: str = "runs/bench/lm-eval"
    docs_dir: str = "docs/results/lm-eval-one-pass"
    """Where ``report.md`` and ``results.json`` are written (one folder per comparison)."""

    def validate(self) -> None:
        if not self.methods or set(self.methods) - set(CACHING):
            raise ConfigError(f"bench lm-eval: methods must be among {list(CACHING)}, got {self.methods}")
        if self.limit < 1 or self.batch_size < 1 or self.repeats < 1 or self.warmup < 0:
            raise ConfigError("bench lm-eval needs limit, batch_size, repeats >= 1 and warmup >= 0")
        if not self.per_method and not (self.one_pass and len(one_pass_labels(self.methods)) > 1):
            raise ConfigError("bench lm-eval with --one-pass-only needs two or more of backbone, memory, knnlm")
        if self.compare_precision not in (None, "bf16", "auto"):
            raise ConfigError(f"bench lm-eval --compare-precision must be bf16 or auto, got {self.compare_precision!r}")
        if self.profile and not self.compare_precision:
            raise ConfigError("bench lm-eval --profile profiles the --compare-precision rounds: give it too")
        if self.compare_precision and not one_pass_labels(self.methods):
            raise ConfigError("bench lm-eval --compare-precision needs backbone, memory or knnlm among the methods")


def tasks_folder(cfg: LmEvalBenchConfig) -> Path:
    if cfg.tasks_dir:
        return Path(cfg.tasks_dir)
    return prepared(TasksConfig(out=str(Path(cfg.out_dir) / "tasks"), battery_limit=cfg.limit, detect_limit=0))


def _responses(out: dict) -> list[tuple[float, bool]]:
    """Every request's (log-likelihood, greedy) of every task, in task and item order."""
    return [tuple(r[0]) for task in sorted(out["samples"])
            for s in sorted(out["samples"][task], key=lambda s: s["doc_id"]) for r in s["resps"]]


def _scores(out: dict) -> dict:
    return {task: {k: v for k, v in res.items() if k.split(",")[0] in ("acc", "acc_mutual_info")}
            for task, res in out["results"].items() if task in out["samples"]}


def measure(cfg: LmEvalBenchConfig, method: str, folder: Path) -> dict:
    """Both paths of one method: seconds, and how their answers compare."""
    args = {} if method == "memory" else {"method": method}
    lm = MlpmemLM(run=cfg.run, batch_size=cfg.batch_size, **args)
    manager, last = task_manager(folder, local_only=True), {}

    def scored(share: bool):
        def go():
            lm.share_context = share
            last[share] = simple_evaluate(model=lm, tasks=cfg.tasks, task_manager=manager, limit=cfg.limit,
                                          log_samples=True)
        return go

    seconds = interleave({SHARED: scored(True), PLAIN: scored(False)}, cfg.warmup, cfg.repeats)
    shared, plain = _responses(last[True]), _responses(last[False])
    return {"requests": len(plain),
            "seconds": {name: {clock: summarize(s) for clock, s in times.items()} for name, times in seconds.items()},
            "speedup_wall": summarize(seconds[PLAIN]["wall"])["median"] / summarize(seconds[SHARED]["wall"])["median"],
            "speedup_cpu": summarize(seconds[PLAIN]["cpu"])["median"] / summarize(seconds[SHARED]["cpu"])["median"],
            "max_abs_loglik_diff": max(abs(a[0] - b[0]) for a, b in zip(shared, plain)),
            "greedy_equal": all(a[1] == b[1] for a, b in zip(shared, plain)),
            "scores_equal": _scores(last[True]) == _scores(last[False])}


def report(r: dict) -> str:
    rows = [[m, v["requests"], f"{v['seconds'][SHARED]['wall']['median']:.1f}",
             f"{v['seconds'][PLAIN]['wall']['median']:.1f}", f"{v['speedup_wall']:.2f}", f"{v['speedup_cpu']:.2f}",
             f"{v['max_abs_loglik_diff']:.2g}", "yes" if v["greedy_equal"] else "**no**",
             "yes" if v["scores_equal"] else "**no**"] for m, v in r["methods"].items()]
    table = markdown_table(["method", "requests", "shared s", "HFLM s", "HFLM / shared (wall)", "(CPU)",
                            "max abs Δ log-lik", "greedy flags equal", "acc and PMI equal"], rows)
    return "\n".join([
        f"# lm-eval multiple choice: shared contexts vs HFLM's path, {r['threads']} threads", "",
        f"Run `{r['run']}`; tasks {', '.join(r['tasks'])} ({r['limit']} items per task, every choice and PMI's "
        f"unconditional request); batch size {r['batch_size']}; median of {r['repeats']} interleaved rounds after "
        f"{r['warmup']} warm-up, model loading not timed.", "", table, "", f"Command: `{r['command']}`."])


def _command(cfg: LmEvalBenchConfig, used: int) -> str:
    return (f"python -m studies bench lm-eval {cfg.run} --methods {','.join(cfg.methods)} --limit {cfg.limit} "
            f"--repeats {cfg.repeats} --threads {used}" + (f" --tasks-dir {cfg.tasks_dir}" if cfg.tasks_dir else "")
            + ("" if cfg.tasks == [BATTERY_GROUP] else f" --tasks {','.join(cfg.tasks)}")
            + ("" if cfg.per_method else " --one-pass-only")
            + (f" --compare-precision {cfg.compare_precision}" if cfg.compare_precision else "")
            + (" --profile" if cfg.profile else ""))


def _header(cfg: LmEvalBenchConfig, used: int, command: str) -> str:
    return (f"# lm-eval multiple choice, {used} threads\n\nRun `{cfg.run}`; tasks {', '.join(cfg.tasks)} ({cfg.limit} "
            f"items per task, every choice and PMI's unconditional request); batch size {cfg.batch_size}; median of "
            f"{cfg.repeats} interleaved rounds after {cfg.warmup} warm-up, model loading not timed.\n\n"
            f"Command: `{command}`.")


def main(cfg: LmEvalBenchConfig) -> dict:
    used = threads(cfg.threads)
    folder = tasks_folder(cfg)
    command = _command(cfg, used)
    if cfg.compare_precision:
        return _main_precision(cfg, used, folder, command)
    results = {"command": command,
               "run": cfg.run, "tasks": cfg.tasks, "limit": cfg.limit, "batch_size": cfg.batch_size,
               "repeats": cfg.repeats, "warmup": cfg.warmup, "threads": used,
               "methods": {m: measure(cfg, m, folder) for m in cfg.methods} if cfg.per_method else {}}
    if cfg.one_pass and len(one_pass_labels(cfg.methods)) > 1:
        results["one_pass"] = measure_one_pass(cfg, task_manager(folder, local_only=True), _responses, _scores)
    out = Path(cfg.docs_dir)
    write_text(out / "results.json", json.dumps(results, indent=1))
    parts = [report(results)] if cfg.per_method else [_header(cfg, used, command)]
    text = "\n\n".join(parts + ([one_pass_report(results["one_pass"])] if "one_pass" in results else []))
    write_text(out / "report.md", text)
    print(text)
    return results


def _main_precision(cfg: LmEvalBenchConfig, used: int, folder: Path, command: str) -> dict:
    """``--compare-precision``: its ``report.md`` and ``results.json`` in ``docs_dir``."""
    results = {"command": command, "run": cfg.run, "tasks": cfg.tasks, "limit": cfg.limit,
               "batch_size": cfg.batch_size, "repeats": cfg.repeats, "warmup": cfg.warmup, "threads": used,
               "precision": measure_precision(cfg, task_manager(folder, local_only=True), _responses)}
    out = Path(cfg.docs_dir)
    write_text(out / "results.json", json.dumps(results, indent=1))
    text = "\n\n".join([_header(cfg, used, command), precision_report(results["precision"])])
    write_text(out / "report.md", text)
    print(text)
    return results
