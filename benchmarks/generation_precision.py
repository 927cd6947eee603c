"""QA answers generated at fp32 and at bf16 (``generation.precision``), side by side in one run.

    python benchmarks/generation_precision.py RUN --questions 200 --out docs/results/generation-precision

``RUN`` is a finished synthetic-facts run (e.g. ``runs/update-study-480-sweep/runs/retrained``, which
``python -m studies update-study`` writes); the backbone alone and its memory mixed at the study's λ answer
``--questions`` questions of the same generator (greedy, after the QA suite's four format demonstrations) at each
precision, interleaved round by round after a warm-up. Written: ``report.md`` and ``results.json`` (seconds per
method and precision, the ratio of medians, exact match at each precision and the share of answers that are the same).
"""

import argparse
import json
import time
from pathlib import Path

from mlpmem.baselines.methods import closed_book_prompts
from mlpmem.inference.augmented_lm import MemoryAugmentedLM
from mlpmem.maintenance.finetune import load_memory
from mlpmem.pipeline.hf_export import open_run
from studies.bench.common import interleave, summarize, threads
from studies.bench.infer.measure import machine
from studies.qa.eval_qa import GenerationConfig, evaluate_questions
from studies.qa.synthetic import SyntheticConfig, generate
from studies.update.groups import questions_of
from studies.update.study import UpdateStudyConfig

PRECISIONS = ("fp32", "bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--entities", type=int, default=480, help="the study's synthetic.num_entities")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--shots", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--out", default="docs/results/generation-precision")
    args = ap.parse_args()
    used = threads(args.threads)
    cfg = UpdateStudyConfig(synthetic={**UpdateStudyConfig().synthetic, "num_entities": args.entities})
    bench = generate(SyntheticConfig(**cfg.synthetic))
    run = open_run(args.run)
    backbone, tokenizer = run.backbone
    models = {"backbone": backbone,
              "memory": MemoryAugmentedLM(backbone, load_memory(run), lam=cfg.lam, tokenizer=tokenizer)}
    questions = questions_of(bench, sorted({q["entity"] for q in bench.questions["test"]}), args.questions)
    last: dict[tuple[str, str], dict] = {}

    def answered(method: str, precision: str):
        gen = GenerationConfig(max_new_tokens=cfg.max_new_tokens, batch_size=args.batch_size, precision=precision)

        def go():
            last[method, precision] = evaluate_questions(models[method], tokenizer, questions,
                                                         lambda qs: closed_book_prompts(qs, args.shots), gen)
        return go

    fns = {f"{m} {p}": answered(m, p) for m in models for p in PRECISIONS}
    seconds = interleave(fns, warmup=1, repeats=args.repeats)
    median = {name: summarize(s["wall"])["median"] for name, s in seconds.items()}
    per_method = {}
    for m in models:
        texts = {p: [r["prediction"] for r in last[m, p]["predictions"]] for p in PRECISIONS}
        per_method[m] = {"em": {p: last[m, p]["em"] for p in PRECISIONS},
                         "f1": {p: last[m, p]["f1"] for p in PRECISIONS},
                         "same_answers": sum(a == b for a, b in zip(*texts.values())) / len(questions),
                         "speedup_wall": median[f"{m} fp32"] / median[f"{m} bf16"]}
    results = {
        "command": f"python benchmarks/generation_precision.py {args.run} --questions {args.questions} --entities "
                   f"{args.entities} --repeats {args.repeats} --out {args.out}",
        "machine": machine(used), "date": time.strftime("%Y-%m-%d"), "questions": len(questions), "lam": cfg.lam,
        "shots": args.shots, "max_new_tokens": cfg.max_new_tokens, "batch_size": args.batch_size,
        "seconds": {name: {clock: summarize(s) for clock, s in times.items()} for name, times in seconds.items()},
        "methods": per_method}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(_report(results))
    print(_report(results))


def _report(r: dict) -> str:
    s = r["seconds"]
    rows = "\n".join(
        f"| {m} | {s[m + ' fp32']['wall']['median']:.1f} | {s[m + ' bf16']['wall']['median']:.1f} | "
        f"**{v['speedup_wall']:.2f}x** | {v['em']['fp32']:.1f} | {v['em']['bf16']:.1f} | {v['f1']['fp32']:.1f} | "
        f"{v['f1']['bf16']:.1f} | {100 * v['same_answers']:.1f} |" for m, v in r["methods"].items())
    return (f"# QA generation at fp32 and at bf16\n\n`{r['command']}` ({r['date']}, {r['machine']['cpu']}, "
            f"{r['machine']['threads']} threads).\n\n"
            f"{r['questions']} questions of the synthetic facts, greedy, {r['max_new_tokens']} new tokens after "
            f"{r['shots']} format demonstrations, batch {r['batch_size']}; the memory mixed at λ = {r['lam']}; "
            f"median wall seconds of {s['backbone fp32']['wall']['n']} interleaved round(s) after one warm-up.\n\n"
            "| method | fp32 s | bf16 s | fp32 / bf16 | EM fp32 | EM bf16 | F1 fp32 | F1 bf16 | same answer % |\n"
            f"|---|---|---|---|---|---|---|---|---|\n{rows}\n")


if __name__ == "__main__":
    main()
