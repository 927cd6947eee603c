"""``python -m studies qa curve``: the QA memory's learning curve, epoch by epoch, in validation perplexity and in
validation questions, to choose the rule that decides how long the QA memory trains.

One training of ``epochs`` epochs under the benchmark's pipeline recipe (its schedule spread over that many epochs,
early stopping off), on the memory run's datastore and teacher, paused at every epoch end: the training resumes from
its checkpoint, so the steps are those of one uninterrupted run. At each epoch end the curve records the training's
own validation evaluation (memory and joint perplexity, the best λ) and EM / F1 of the benchmark's validation
questions at each λ of ``lambdas`` (λ = 0, the backbone alone, once). The memory of each epoch is kept under
``<out>/epoch-<e>/memory`` and each epoch's scores in ``<out>/epoch-<e>/scores.json``, so an interrupted curve
resumes. The report compares the stopping rules: the last epoch, the best validation perplexity (what early stopping
keeps), the best validation F1.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from mlpmem.baselines.methods import closed_book_prompts
from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.pipeline import run_stage
from mlpmem.pipeline.train import build_memory, eval_data, train_data
from mlpmem.training.checkpoint import STATE_FILE, TrainState
from mlpmem.training.loop import CHECKPOINT, train_memory
from mlpmem.training.selection import record_evaluation
from mlpmem.utils.shards import read_json, write_json
from studies.qa.eval_qa import tune_lambda
from studies.qa.runner import Context

SCORES = "scores.json"


@dataclasses.dataclass
class CurveConfig(Config):
    benchmark: str = "halueval_qa"
    epochs: int = 12
    lambdas: list[float] = dataclasses.field(default_factory=lambda: [0.2, 0.35])
    out: str = "runs/qa/halueval_qa/curve"
    """Its checkpoint, the memory and scores of every epoch."""

    def validate(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"qa curve needs epochs >= 1, got {self.epochs}")
        if not self.lambdas or any(not 0.0 < lam <= 1.0 for lam in self.lambdas):
            raise ConfigError(f"qa curve lambdas must be in (0, 1], got {self.lambdas}")


def learning_curve(ctx: Context, curve: CurveConfig) -> dict:
    """Train the benchmark's memory ``curve.epochs`` epochs, scoring it at every epoch end (see the module)."""
    run = ctx.run
    for stage in ("datastore", "knnlm", "teacher"):  # the teacher takes its temperature from the kNN-LM sweep
        run_stage(run, stage)
    train_cfg = dataclasses.replace(run.cfg.train, epochs=curve.epochs, patience=None, eval_every=None,
                                    restore_best=False)  # every epoch end, its own weights
    data, head_vocab = train_data(run)
    memory, out = build_memory(run, head_vocab), Path(curve.out)
    steps_per_epoch = math.ceil(data.rows_per_epoch / train_cfg.batch_size)
    backbone_row = _scores_at(ctx, None, [0.0], out / "backbone")
    epochs = []
    for epoch in range(1, curve.epochs + 1):
        where = out / f"epoch-{epoch}"
        if not (where / SCORES).exists():
            state = _train_to(memory, data, run, train_cfg, out / "train", epoch * steps_per_epoch, ctx.progress)
            memory.save_pretrained(where / "memory")
            validation = next(h for h in state["history"] if h["step"] == epoch * steps_per_epoch)
            scores = _scores_at(ctx, where / "memory", curve.lambdas, where)
            write_json(where / SCORES, {"epoch": epoch, "validation": _ppl(validation), **scores})
        epochs.append(read_json(where / SCORES, f"epoch {epoch} scores"))
    return {"benchmark": curve.benchmark, "epochs": epochs, "backbone": backbone_row, "lambdas": curve.lambdas,
            "questions": len(ctx.questions["validation"]), "rules": stopping_rules(epochs),
            "recipe": {k: v for k, v in dataclasses.asdict(train_cfg).items() if k in ("alpha", "lr", "batch_size")}}


def _train_to(memory, data, run, train_cfg, out: Path, step: int, progress: bool) -> dict:
    """Train (resuming from ``out``'s checkpoint) until ``step``; the state with its history."""
    saved = out / CHECKPOINT / STATE_FILE
    if saved.exists() and read_json(saved, "curve checkpoint")["step"] > step:
        raise ConfigError(f"{out} is trained past step {step}: delete {out.parent} to draw the curve again")
    return train_memory(memory, data, eval_data(run, "validation"), train_cfg, out, progress, stop_after=step,
                        memory_spec=run.cfg.memory.to_dict())


def _ppl(entry: dict) -> dict:
    return {k: entry[k] for k in ("memory_ppl", "joint_ppl", "best_lambda", "backbone_ppl")}


def _scores_at(ctx: Context, memory_dir: Path | None, lambdas: list[float], where: Path) -> dict:
    """EM / F1 of the validation questions with the memory of ``memory_dir`` at each λ (None: the backbone)."""
    path = where / "questions.json"
    if path.exists():
        return read_json(path, "curve question scores")
    model, tokenizer = ctx.backbone
    mixed = model if memory_dir is None else MemoryAugmentedForCausalLM.from_memory(memory_dir, model, tokenizer,
                                                                                     lam=lambdas[0])

    def at(lam: float):
        if memory_dir is not None:
            mixed.lam = lam
        return mixed

    prompts = lambda qs: closed_book_prompts(qs, ctx.cfg.shots)  # noqa: E731
    _, rows = tune_lambda(at, tokenizer, ctx.questions["validation"], lambdas, prompts, ctx.cfg.generation)
    scores = {"questions": rows}
    where.mkdir(parents=True, exist_ok=True)
    write_json(path, scores)
    return scores


def stopping_rules(epochs: list[dict], patience: int = 3) -> dict:
    """The epoch each stopping rule keeps and its validation scores: the last epoch; early stopping on validation
    joint perplexity with ``patience`` (stop after that many epochs without a lower one, keep the lowest so far, as
    ``train.patience`` does); the lowest validation perplexity over all epochs; the highest validation F1 at any λ."""
    def best_f1(row: dict) -> dict:
        return max(row["questions"], key=lambda r: (round(r["f1"], 6), -r["lambda"]))

    state = TrainState(built_from={})  # the training loop's own patience bookkeeping, one evaluation per epoch
    for row in epochs:
        record_evaluation(state, row["epoch"], row["validation"]["joint_ppl"], patience)
        if state.stopped:
            break
    kept = next(row for row in epochs if row["epoch"] == state.best_step)
    by_ppl = min(epochs, key=lambda row: (row["validation"]["joint_ppl"], row["epoch"]))
    by_f1 = max(epochs, key=lambda row: (round(best_f1(row)["f1"], 6), -row["epoch"]))
    rules = (("last", epochs[-1]), (f"early stopping, patience {patience}", kept), ("lowest validation ppl", by_ppl),
             ("highest validation F1", by_f1))
    return {name: {"epoch": row["epoch"], "joint_ppl": row["validation"]["joint_ppl"], **best_f1(row)}
            for name, row in rules}


def curve_report(results: dict, command: str) -> str:
    """Markdown: one row per epoch (validation perplexity, F1 / EM at each λ), then the stopping rules."""
    lambdas = results["lambdas"]
    base = results["backbone"]["questions"][0]
    lines = [f"# QA memory learning curve ({results['benchmark']})", "", f"`{command}`", "",
             f"{results['questions']} validation questions; the backbone alone (λ = 0): F1 {base['f1']:.1f}, "
             f"EM {base['em']:.1f}. Validation perplexity is the training's own evaluation (held-out passages).", "",
             "| epoch | memory PPL | joint PPL | best λ (PPL) | " + " | ".join(f"F1 λ={lam}" for lam in lambdas)
             + " | " + " | ".join(f"EM λ={lam}" for lam in lambdas) + " |",
             "|---:|---:|---:|---:|" + "---:|" * (2 * len(lambdas))]
    for row in results["epochs"]:
        v, qs = row["validation"], {r["lambda"]: r for r in row["questions"]}
        lines.append(f"| {row['epoch']} | {v['memory_ppl']:.3f} | {v['joint_ppl']:.3f} | {v['best_lambda']} | "
                     + " | ".join(f"{qs[lam]['f1']:.1f} ± {qs[lam]['f1_se']:.1f}" for lam in lambdas) + " | "
                     + " | ".join(f"{qs[lam]['em']:.1f}" for lam in lambdas) + " |")
    lines += ["", "| stopping rule | epoch | joint PPL | best F1 (at λ) |", "|---|---:|---:|---:|"]
    for name, rule in results["rules"].items():
        lines.append(f"| {name} | {rule['epoch']} | {rule['joint_ppl']:.3f} | "
                     f"{rule['f1']:.1f} ± {rule['f1_se']:.1f} (λ {rule['lambda']}) |")
    return "\n".join(lines) + "\n"


def plot_curve(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in results["epochs"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(epochs, [row["validation"]["joint_ppl"] for row in results["epochs"]], "o-", label="memory + backbone")
    left.axhline(results["epochs"][0]["validation"]["backbone_ppl"], color="grey", ls="--", label="backbone")
    left.set(xlabel="epoch", ylabel="validation perplexity", title="held-out passages")
    for lam in results["lambdas"]:
        f1 = [next(r["f1"] for r in row["questions"] if r["lambda"] == lam) for row in results["epochs"]]
        right.plot(epochs, f1, "o-", label=f"λ = {lam}")
    right.axhline(results["backbone"]["questions"][0]["f1"], color="grey", ls="--", label="backbone")
    right.set(xlabel="epoch", ylabel="F1", title=f"{results['questions']} validation questions")
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
