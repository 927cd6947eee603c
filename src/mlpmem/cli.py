"""One entry point: ``mlpmem <stage> [config.yaml] [--set key.sub=value ...]``."""

from __future__ import annotations

import argparse
import json
import sys

from mlpmem.errors import MlpmemError


def _load(args):
    from mlpmem.config import PipelineConfig

    return PipelineConfig.from_yaml(args.config, args.set)


def _run(args):
    from mlpmem.pipeline import Run

    return Run(_load(args), progress=not args.quiet)


def cmd_corpora(args):
    from mlpmem.shipped_corpora import CORPORA

    for name, desc in CORPORA.items():
        print(f"{name:28s} {desc}")


def cmd_prepare_corpus(args):
    from mlpmem.shipped_corpora import prepare

    print(prepare(args.name, seed=args.seed))


def cmd_datastore(args):
    from mlpmem.pipeline import stage_datastore

    print(json.dumps(stage_datastore(_run(args), args.rebuild), indent=1))


def cmd_knnlm(args):
    from mlpmem.pipeline import stage_knnlm
    from mlpmem.report import knnlm_summary

    print(knnlm_summary(stage_knnlm(_run(args))))


def cmd_teacher(args):
    from mlpmem.pipeline import stage_teacher

    manifest = stage_teacher(_run(args), args.rebuild)
    print(f"teacher: {manifest['rows']} positions, {manifest['bytes_per_token']} bytes/token")


def cmd_run(args):
    from mlpmem.pipeline import run_pipeline
    from mlpmem.report import retrieval_table

    run = _run(args)
    run_pipeline(run, rebuild=args.rebuild)
    print(retrieval_table(run))


COMMANDS = {
    "corpora": (cmd_corpora, "list the shipped corpora", False),
    "prepare-corpus": (cmd_prepare_corpus, "prepare a shipped corpus into train/validation/test JSONL", False),
    "datastore": (cmd_datastore, "build the datastore (training keys) and the evaluation keystores", True),
    "knnlm": (cmd_knnlm, "kNN-LM baseline: sweep k, T, lambda on validation, report test perplexity", True),
    "teacher": (cmd_teacher, "build the sparse kNN teacher (self excluded) for every datastore position", True),
    "run": (cmd_run, "run every stage of a config and print the results table", True),
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
    prep = sub.choices["prepare-corpus"]
    prep.add_argument("name")
    prep.add_argument("--seed", type=int, default=0)
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
