"""The update study's multiple-choice scoring with shared contexts vs every pair in full, side by side in one run.

    python benchmarks/choice_scoring.py RUN --questions 200 --out docs/results/choice-scoring

``RUN`` is a finished synthetic-facts run (e.g. ``runs/update-study-480-lr/runs/updated``, which
``python -m studies update-study`` writes); its memory is mixed at the study's λ and scores ``--questions``
questions of the same generator (each against its distractors, as :class:`studies.update.scoring.Scorer` asks them) both
ways, interleaved round by round after a warm-up. Written: ``report.md`` and ``results.json`` (seconds, the ratio of
medians, the largest difference of any sum and whether every question's choice is the same).
"""

import argparse
import json
import time
from pathlib import Path

from mlpmem.inference.augmented_lm import MemoryAugmentedLM
from mlpmem.inference.prompts import qa_prompt
from mlpmem.maintenance.finetune import load_memory
from mlpmem.pipeline.hf_export import open_run
from studies.bench.common import interleave, summarize, threads
from studies.bench.infer.measure import machine
from studies.qa.choice import continuation_logprobs
from studies.qa.synthetic import SyntheticConfig, generate
from studies.update.groups import questions_of
from studies.update.scoring import Scorer
from studies.update.study import UpdateStudyConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--entities", type=int, default=480, help="the study's synthetic.num_entities")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--out", default="docs/results/choice-scoring")
    args = ap.parse_args()
    used = threads(args.threads)
    cfg = UpdateStudyConfig(synthetic={**UpdateStudyConfig().synthetic, "num_entities": args.entities})
    bench = generate(SyntheticConfig(**cfg.synthetic))
    run = open_run(args.run)
    model, tokenizer = run.backbone
    mixed = MemoryAugmentedLM(model, load_memory(run), lam=cfg.lam, tokenizer=tokenizer)
    scorer = Scorer(bench, cfg, (model, tokenizer))
    questions = questions_of(bench, sorted({q["entity"] for q in bench.questions["test"]}), args.questions)
    pairs, spans = [], []
    for q in questions:
        options = scorer.choices(q)
        spans.append(len(options))
        pairs += [(qa_prompt(q["question"]), " " + o) for o in options]
    last = {}

    def scored(share: bool):
        def go():
            last[share] = continuation_logprobs(mixed, tokenizer, pairs, args.batch_size, share_context=share)
        return go

    names = {"shared contexts": True, "every pair in full": False}
    seconds = interleave({name: scored(share) for name, share in names.items()}, warmup=1, repeats=args.repeats)
    median = {name: summarize(s["wall"])["median"] for name, s in seconds.items()}
    picks = {share: _picks(last[share], spans) for share in (True, False)}
    results = {
        "command": f"python benchmarks/choice_scoring.py {args.run} --questions {args.questions} --entities "
                   f"{args.entities} --repeats {args.repeats} --out {args.out}",
        "machine": machine(used), "date": time.strftime("%Y-%m-%d"), "questions": len(questions),
        "pairs": len(pairs), "lam": cfg.lam, "batch_size": args.batch_size,
        "seconds": {name: {clock: summarize(s) for clock, s in times.items()} for name, times in seconds.items()},
        "speedup_wall": median["every pair in full"] / median["shared contexts"],
        "max_abs_diff": max(abs(a - b) for a, b in zip(last[True], last[False])),
        "same_choices": picks[True] == picks[False]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(_report(results))
    print(_report(results))


def _picks(scores: list[float], spans: list[int]) -> list[int]:
    out, at = [], 0
    for n in spans:
        out.append(max(range(n), key=lambda i, s=scores[at : at + n]: s[i]))
        at += n
    return out


def _report(r: dict) -> str:
    s = r["seconds"]
    rows = "\n".join(f"| {name} | {v['wall']['median']:.1f} ({v['wall']['min']:.1f}-{v['wall']['max']:.1f}) | "
                     f"{v['cpu']['median']:.1f} |" for name, v in s.items())
    return (f"# Multiple-choice scoring: shared contexts vs every pair in full\n\n`{r['command']}` "
            f"({r['date']}, {r['machine']['cpu']}, {r['machine']['threads']} threads).\n\n"
            f"{r['questions']} questions of the synthetic facts, each with its distractors ({r['pairs']} "
            f"(question, choice) pairs), scored by the run's memory mixed at λ = {r['lam']} "
            f"(the update study's scorer), batch {r['batch_size']}; median (min-max) of "
            f"{s['shared contexts']['wall']['n']} interleaved rounds after one warm-up.\n\n"
            f"| path | wall s | CPU s |\n|---|---|---|\n{rows}\n\n"
            f"Every pair in full / shared contexts: **{r['speedup_wall']:.2f}x** (wall). Largest difference of any "
            f"pair's Σ log p: {r['max_abs_diff']:.2g}; every question's choice the same: "
            f"{'yes' if r['same_choices'] else '**no**'}.\n")


if __name__ == "__main__":
    main()
