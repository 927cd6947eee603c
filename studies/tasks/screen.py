"""``python -m studies tasks screen``: is the backbone above chance on each candidate task? The nine to evaluate.

The candidates (:func:`studies.tasks.catalog.candidates`, or ``tasks``) are written as lm-eval
tasks over ``items`` items each, drawn from outside the items ``python -m studies tasks prepare`` evaluates
(:func:`studies.tasks.choice_tasks.screen_items`), and scored by the plain backbone through
lm-eval (``acc`` and ``acc_mutual_info``). Per task and scoring, the margin over chance is the mean over
items of ``correct - 1/k`` (k: the item's number of choices) with its seeded bootstrap interval
(:mod:`mlpmem.evaluation.stats`). A task **passes** when, by log-likelihood or by PMI, the lower bound
of that interval is above zero; :func:`~studies.tasks.catalog.choose_nine` keeps nine.

Writes ``out/screen.json`` (the rule, each candidate's scores, the chosen nine) and ``out/tasks/`` (the
screen's task files); ``python -m studies tasks prepare --screen out/screen.json`` then writes the chosen nine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM

from mlpmem.backbone import DEFAULT_BACKBONE, load_backbone
from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import task_manager
from mlpmem.evaluation.stats import BootstrapConfig, bootstrap_mean
from studies.tasks import choice_tasks
from studies.tasks.catalog import SelectionRule, candidates, choose_nine, list_multiple_choice
from studies.tasks.prepare import tasks_root, write_choice_task
from studies.tasks.writer import reset_folder, write_manifest

SCORINGS = {"acc": "acc", "pmi": "acc_mutual_info"}


@dataclass
class ScreenConfig(Config):
    out: str = ""
    """Folder of screen.json and the screen's tasks (empty: ``<task folder>-screen`` in the mlpmem cache)."""
    tasks: list[str] = field(default_factory=list)
    """BIG-bench tasks to screen (empty: every candidate of the rule)."""
    items: int = 60
    """Items per task, outside the evaluated ones where the task has enough."""
    mc_limit: int = 200
    """Items per task that ``tasks prepare`` evaluates (the screen avoids them)."""
    backbone: str = DEFAULT_BACKBONE
    batch_size: int = 16
    seed: int = 0
    rule: SelectionRule = field(default_factory=SelectionRule)

    def validate(self) -> None:
        if self.items < 10 or self.batch_size < 1:
            raise ConfigError("tasks screen: items must be >= 10 and batch_size >= 1")

    @property
    def folder(self) -> Path:
        return Path(self.out) if self.out else tasks_root().with_name("lm-eval-tasks-screen")


def margin(samples: list[dict], metric: str, cfg: BootstrapConfig) -> dict:
    """The mean of ``correct - 1/k`` over ``samples`` (lm-eval logged samples) with its interval, in points."""
    over = [s[metric] - 1 / len(s["doc"]["choices"]) for s in samples]
    interval = bootstrap_mean(over, cfg).scaled(100)
    score = bootstrap_mean([s[metric] for s in samples], cfg).scaled(100)
    return {"score": score.estimate, "stderr": score.stderr, "margin": interval.estimate,
            "margin_low": interval.low, "margin_high": interval.high}


def _write_tasks(cfg: ScreenConfig, names: list[str], out: Path) -> dict[str, tuple[str, int]]:
    written = {}
    for task in names:
        items, data, overlap = choice_tasks.screen_items(task, cfg.mc_limit, cfg.items, cfg.seed)
        written[task] = (write_choice_task(out, task, items, data, split="screen"), overlap)
    write_manifest(out, {"screen": True, "tasks": list(written)})
    return written


def _row(task: str, name: str, overlap: int, samples: list[dict], seed: int) -> dict:
    stats = {key: margin(samples, metric, BootstrapConfig(seed=seed)) for key, metric in SCORINGS.items()}
    low = max(s["margin_low"] for s in stats.values())
    chance = 100 * sum(1 / len(s["doc"]["choices"]) for s in samples) / len(samples)
    return {"task": task, "lm_eval_task": name, "n": len(samples), "overlap_with_eval": overlap,
            "chance": chance, **stats, "margin_low": low, "passes": low > 0}


def screen(cfg: ScreenConfig, progress: bool = True) -> dict:
    """Score the candidates with the backbone; write and return ``screen.json``'s content."""
    names = cfg.tasks or [info.name for info in candidates(list_multiple_choice(), cfg.rule)]
    folder = cfg.folder
    folder.mkdir(parents=True, exist_ok=True)
    written = _write_tasks(cfg, names, reset_folder(folder / "tasks"))
    model, tokenizer = load_backbone(cfg.backbone)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, backend="causal", batch_size=cfg.batch_size)
    results = simple_evaluate(model=lm, tasks=[n for n, _ in written.values()], log_samples=True,
                              task_manager=task_manager(folder / "tasks", local_only=True),
                              verbosity="INFO" if progress else "WARNING")
    rows = [_row(task, name, overlap, results["samples"][name], cfg.seed) for task, (name, overlap) in written.items()]
    report = {"backbone": cfg.backbone, "config": asdict(cfg), "rows": rows, "chosen": choose_nine(rows)}
    (folder / "screen.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def screen_table(report: dict) -> str:
    """Markdown: per task n, chance, accuracy by log-likelihood and by PMI, the margin's lower bound, chosen."""
    lines = ["| task | n | chance | acc (LL) | acc (PMI) | margin low | passes | chosen |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(report["rows"], key=lambda r: -r["margin_low"]):
        acc, pmi = r["acc"], r["pmi"]
        lines.append(f"| {r['task']} | {r['n']} | {r['chance']:.1f} | {acc['score']:.1f} ± {acc['stderr']:.1f} | "
                     f"{pmi['score']:.1f} ± {pmi['stderr']:.1f} | {r['margin_low']:+.1f} | "
                     f"{'yes' if r['passes'] else 'no'} | {'**yes**' if r['task'] in report['chosen'] else ''} |")
    return "\n".join(lines)


def chosen_tasks(path: str | Path) -> list[str]:
    """The tasks a ``screen.json`` chose (one line of error if it is missing or chose none)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such screen.json (run python -m studies tasks screen first)")
    chosen = json.loads(path.read_text()).get("chosen") or []
    if not chosen:
        raise ConfigError(f"{path}: the screen chose no task (no candidate was above chance)")
    return chosen
