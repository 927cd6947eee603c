"""One entry point: ``mlpmem <stage> [config.yaml] [--set key.sub=value ...]``."""

from __future__ import annotations

import argparse
import json
import sys

from mlpmem.errors import MlpmemError


def _load(args):
    from mlpmem.pipeline.config import PipelineConfig

    return PipelineConfig.from_yaml(args.config, args.set)


def _run(args):
    from mlpmem.pipeline.run import Run

    return Run(_load(args), progress=not args.quiet)


def cmd_corpora(args):
    from mlpmem.corpora.shipped import CORPORA

    for name, desc in CORPORA.items():
        print(f"{name:28s} {desc}")


def cmd_prepare_corpus(args):
    from mlpmem.corpora.shipped import prepare

    print(prepare(args.name, seed=args.seed))


def cmd_datastore(args):
    from mlpmem.pipeline.datastore import stage_datastore

    print(json.dumps(stage_datastore(_run(args), args.rebuild), indent=1))


def cmd_knnlm(args):
    from mlpmem.pipeline.knnlm import stage_knnlm
    from mlpmem.reporting.run_report import knnlm_summary

    print(knnlm_summary(stage_knnlm(_run(args))))


def cmd_teacher(args):
    from mlpmem.pipeline.teacher import stage_teacher

    manifest = stage_teacher(_run(args), args.rebuild)
    print(f"teacher: {manifest['rows']} positions, {manifest['bytes_per_token']} bytes/token")


def cmd_train(args):
    from mlpmem.pipeline.train import stage_train

    state = stage_train(_run(args), args.rebuild)
    print(f"trained {state['step']} steps in {state['train_seconds']:.0f} s; history: "
          + json.dumps(state["history"][-1:] and {k: state["history"][-1][k] for k in ("memory_ppl", "joint_ppl")}))


def _print_results(run, results):
    from mlpmem.reporting.run_report import (
        distribution_table,
        results_table,
        retrieval_table,
    )

    print(retrieval_table(run), results_table(results), distribution_table(results), sep="\n\n")
    print(f"\nreport: {run.path('report.md')}")


def cmd_eval(args):
    from mlpmem.pipeline.evaluate import stage_eval

    run = _run(args)
    _print_results(run, stage_eval(run))


def cmd_report(args):
    from mlpmem.reporting.run_report import write_run_report
    from mlpmem.utils.shards import read_json

    run = _run(args)
    results = read_json(run.path("results.json"), "run results (run `mlpmem eval` first)")
    write_run_report(run, results)
    _print_results(run, results)


def cmd_run(args):
    from mlpmem.pipeline import run_pipeline

    run = _run(args)
    _print_results(run, run_pipeline(run, rebuild=args.rebuild))


def cmd_ablate(args):
    from mlpmem.experiments.ablation import run_study, study_table

    print(study_table(args.study, run_study(_run(args), args.study)))


def cmd_summarize(args):
    import shutil
    from pathlib import Path

    from mlpmem.reporting.run_report import summary_table

    table = summary_table(args.runs)
    print(table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table + "\n")
    if args.copy_reports:  # reports and figures next to the summary, for the docs (runs/ is not versioned)
        for run_dir in map(Path, args.runs):
            dest = Path(args.copy_reports) / run_dir.name
            dest.mkdir(parents=True, exist_ok=True)
            if not (run_dir / "report.md").exists():  # a retrieval-only run: its kNN-LM sweep
                from mlpmem.reporting.run_report import sweep_table
                from mlpmem.utils.shards import read_json

                knn = read_json(run_dir / "knnlm" / "results.json", "knnlm results")
                (dest / "knnlm-sweep.md").write_text(f"# kNN-LM sweep on validation, `{run_dir}`\n\n"
                                                     + sweep_table(knn) + "\n")
            for f in [*run_dir.glob("*.md"), *run_dir.glob("*.png"), *run_dir.glob("ablations/*/results.*")]:
                target = dest / (f"ablation-{f.parent.name}{f.suffix}" if "ablations" in f.parts else f.name)
                shutil.copyfile(f, target)


def cmd_demo(args):
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "configs" / f"{'quick' if args.mode == 'quick' else 'default'}.yaml"
    if not config.is_file():
        raise MlpmemError(f"demo config {config} not found (run the demo from a source checkout)")
    args.config = str(config)
    cmd_run(args)


def cmd_mosaics_train(args):
    from mlpmem.experiments.mosaics.cli import cmd_mosaics_train as run

    run(args)


def cmd_mosaics_eval(args):
    from mlpmem.experiments.mosaics.cli import cmd_mosaics_eval as run

    run(args)


def cmd_mosaics_memory(args):
    from mlpmem.experiments.mosaics.cli import cmd_mosaics_memory as run

    run(args)


def cmd_mosaics_recall(args):
    from mlpmem.experiments.mosaics.cli import cmd_mosaics_recall as run

    run(args)


def cmd_generate(args):
    from mlpmem.inference.augmented_lm import MemoryAugmentedLM
    from mlpmem.pipeline.evaluate import load_memory

    run = _run(args)
    model, tokenizer = run.backbone
    lam = args.lam
    if lam is None:
        from mlpmem.utils.shards import read_json

        lam = read_json(run.path("results.json"), "run results (run `mlpmem eval` first)")["lambda"]
    mixed = MemoryAugmentedLM(model, load_memory(run), lam=lam, tokenizer=tokenizer)
    inputs = tokenizer([args.prompt], return_tensors="pt")
    out = mixed.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                         pad_token_id=tokenizer.eos_token_id, **({"top_p": 0.9} if args.sample else {}))
    print(tokenizer.decode(out[0], skip_special_tokens=True))


def cmd_bench_infer(args):
    from mlpmem.experiments.bench.cli import bench_infer

    bench_infer(args)


def cmd_bench_offline(args):
    from mlpmem.experiments.bench.cli import bench_offline

    bench_offline(args)


def cmd_eval_qa(args):
    from mlpmem.experiments.qa.cli import cmd_eval_qa as run

    run(args)


def cmd_qa_report(args):
    from mlpmem.experiments.qa.cli import cmd_qa_report as run

    run(args)


def cmd_bench_scale(args):
    from mlpmem.experiments.bench.scale import main_from_args

    main_from_args(args)


COMMANDS = {
    "corpora": (cmd_corpora, "list the shipped corpora", False),
    "prepare-corpus": (cmd_prepare_corpus, "prepare a shipped corpus into train/validation/test JSONL", False),
    "datastore": (cmd_datastore, "build the datastore (training keys) and the evaluation keystores", True),
    "knnlm": (cmd_knnlm, "kNN-LM baseline: sweep k, T, lambda on validation, report test perplexity", True),
    "teacher": (cmd_teacher, "build the sparse kNN teacher (self excluded) for every datastore position", True),
    "train": (cmd_train, "train the MLP Memory on the datastore keys and the sparse teacher", True),
    "eval": (cmd_eval, "test table, lambda curve, distribution statistics and report of a run", True),
    "report": (cmd_report, "rewrite a run's report.md and figures from its results.json (no recomputation)", True),
    "run": (cmd_run, "run every stage of a config and print the results table", True),
    "generate": (cmd_generate, "continue a prompt with the memory-augmented model of a run", True),
    "ablate": (cmd_ablate, "memory variants (--study head-init|alpha|size|epochs|layer|teacher), validation PPL", True),
    "summarize": (cmd_summarize, "one table over several finished run folders", False),
    "mosaics-train": (cmd_mosaics_train, "Memory Mosaics v2 and its matched Transformer: data, tokenizer, training", True),
    "mosaics-eval": (cmd_mosaics_eval, "Memory Mosaics v2 vs Transformer: the three questions, table and plot", True),
    "mosaics-memory": (cmd_mosaics_memory, "an MLP Memory on top of each trained Mosaics/Transformer model", True),
    "mosaics-recall": (cmd_mosaics_recall, "planted key-value recall: tiny Memory Mosaics vs Transformers", False),
    "demo": (cmd_demo, "the whole pipeline on the shipped default (--mode quick|full)", False),
    "eval-qa": (cmd_eval_qa, "EM/F1 of one method (base, rag-*, knnlm, cpt, lora, memory) on a JSONL of questions",
                False),
    "qa-report": (cmd_qa_report, "the whole QA comparison, no-regression checks, ablations and report", True),
    "bench-infer": (cmd_bench_infer, "time to first token and decode speed: backbone, memory, kNN-LM, RAG", False),
    "bench-offline": (cmd_bench_offline, "speed of key extraction, teacher and training on a capped corpus slice",
                      False),
    "bench-scale": (cmd_bench_scale, "1 vs N processes, peak RSS against datastore size, resume vs rerun", False),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlpmem", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (func, help_text, takes_config) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        if takes_config:
            p.add_argument("config", help="YAML config (see configs/)")
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="override a config value, e.g. --set teacher.k=256")
            p.add_argument("--rebuild", action="store_true", help="rebuild stages even if complete")
            p.add_argument("--quiet", action="store_true", help="no progress bars")
    gen = sub.choices["generate"]
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--lam", type=float, default=None, help="memory weight (default: the λ chosen on validation)")
    gen.add_argument("--max-new-tokens", type=int, default=40)
    gen.add_argument("--sample", action="store_true", help="nucleus sampling instead of greedy decoding")
    from mlpmem.experiments.ablation import ALL_STUDIES

    sub.choices["ablate"].add_argument("--study", required=True, choices=ALL_STUDIES)
    summ = sub.choices["summarize"]
    summ.add_argument("runs", nargs="+", help="run folders")
    summ.add_argument("--out", help="also write the table to this Markdown file")
    summ.add_argument("--copy-reports", metavar="DIR", help="copy each run's report.md and figures to DIR/<run>/")
    from mlpmem.experiments.mosaics.cli import add_arguments as add_mosaics_arguments

    for name in ("mosaics-train", "mosaics-eval", "mosaics-memory"):
        add_mosaics_arguments(sub.choices[name])
    sub.choices["mosaics-recall"].add_argument("--steps", type=int, default=150)
    demo = sub.choices["demo"]
    demo.add_argument("--mode", choices=("quick", "full"), default="quick")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    demo.add_argument("--rebuild", action="store_true")
    demo.add_argument("--quiet", action="store_true")
    from mlpmem.experiments.bench.scale import add_arguments

    add_arguments(sub.choices["bench-scale"])
    prep = sub.choices["prepare-corpus"]
    prep.add_argument("name")
    prep.add_argument("--seed", type=int, default=0)
    from mlpmem.experiments.qa.cli import add_arguments as add_qa_arguments

    add_qa_arguments(sub.choices)
    from mlpmem.experiments.bench.cli import add_arguments as add_bench_arguments

    add_bench_arguments(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except MlpmemError as exc:
        print(f"mlpmem: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
