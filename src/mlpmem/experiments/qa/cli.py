"""``mlpmem eval-qa`` (one method on a JSONL of questions) and ``mlpmem qa-report`` (the whole QA report)."""

from __future__ import annotations

import json

from mlpmem.experiments.qa.suite import METHODS


def add_arguments(choices) -> None:
    p = choices["eval-qa"]
    p.add_argument("questions", help='JSONL of {"question": ..., "answers": [...]} (optionally "id")')
    p.add_argument("--method", choices=METHODS, default="base")
    p.add_argument("--run", help="a finished memory run folder (memory, knnlm; LoRA matches its parameters)")
    p.add_argument("--corpus", help="documents (JSONL with 'text', or text files) for rag-*, cpt, lora")
    p.add_argument("--lam", type=float, default=None, help="mixing weight (default: the run's validation choice)")
    p.add_argument("--lora-params", type=int, default=None, help="LoRA parameter budget when no --run is given")
    p.add_argument("--backbone", default="smollm2-135m")
    p.add_argument("--shots", type=int, default=0, help="format demonstrations before each question (0-8)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", help="write the score and every prediction to this JSON file")
    p.add_argument("--quiet", action="store_true")
    r = choices["qa-report"]
    r.add_argument("--no-ablations", action="store_true", help="skip the ablation studies")
    r.add_argument("--report-only", action="store_true",
                   help="compute nothing: write the report from what earlier (interrupted) runs finished")


def cmd_eval_qa(args) -> None:
    from mlpmem.backbone import load_backbone
    from mlpmem.experiments.qa.eval_qa import (
        GenerationConfig,
        evaluate_questions,
        method_model,
        read_questions,
    )
    from mlpmem.utils.runtime import set_threads

    set_threads()
    questions = read_questions(args.questions)
    model, tokenizer = load_backbone(args.backbone)
    mixed, prompt_fn, info = method_model(args.method, model, tokenizer, args.run, args.corpus, args.lam,
                                          args.lora_params, progress=not args.quiet, shots=args.shots)
    result = evaluate_questions(mixed, tokenizer, questions, prompt_fn,
                                GenerationConfig(args.max_new_tokens, args.batch_size), progress=not args.quiet)
    summary = {"method": args.method, "em": result["em"], "f1": result["f1"], "n": result["n"], **info}
    print(json.dumps(summary, default=float))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**summary, "predictions": result["predictions"]}, f, indent=1, default=float)


def cmd_qa_report(args) -> None:
    from mlpmem.experiments.qa.report import write_report
    from mlpmem.experiments.qa.suite import QASuiteConfig, run_suite

    cfg = QASuiteConfig.from_yaml(args.config, args.set)
    if args.no_ablations:
        cfg.ablations = None
    results = run_suite(cfg, progress=not args.quiet, compute=not args.report_only)
    command = f"mlpmem qa-report {args.config}" + "".join(f" --set {s}" for s in args.set)
    path = write_report(results, cfg.docs_dir, command)
    print(path.read_text())
    print(f"report: {path}")
