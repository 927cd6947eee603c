"""Every command of ``python -m studies``, one entry each, declared as :mod:`mlpmem.cli.spec` declares ``mlpmem``'s.

The functions are ``"module:function"`` strings, resolved only when that command runs or shows its help, so
``python -m studies --help`` imports no model library. Run from the repository's root (the studies are not
installed; their configs are paths under ``studies/``).
"""

from __future__ import annotations

from mlpmem.cli.spec import Arg, Command, Program, comma_ints, comma_names, run
from mlpmem.cli.table import CONFIG, QUIET, RUN, SET

NAME = "python -m studies"

GROUPS = {
    "": "the studies of a finished run or a preset",
    "qa": "knowledge QA: EM/F1 of one method, the whole comparison",
    "bench": "speed benchmarks: inference, the gate's decode, offline stages, packing, scale, break-even",
    "tasks": "local lm-eval tasks from shipped data (compare methods on them with `mlpmem compare`)",
}

QA = "studies.qa.cli"
BENCH = "studies.bench.cli"
INFER = "studies.bench.infer.config:InferBenchConfig"
OFFLINE = "studies.bench.offline:OfflineBenchConfig"
PACKING = "studies.bench.packing:PackingBenchConfig"
LM_EVAL_BENCH = "studies.bench.lm_eval_contexts:LmEvalBenchConfig"
KNN = "studies.bench.knn_setup:KnnSetupConfig"
BREAKEVEN = "studies.bench.breakeven.config:BreakEvenConfig"


def comma_floats(text: str) -> list[float]:
    """An option's ``X,X,...`` as numbers."""
    return [float(x) for x in text.split(",") if x]


def bench_args(config: str) -> tuple[Arg, ...]:
    """The options shared by ``bench infer`` and ``bench offline``; left out, ``config``'s defaults apply."""
    return (Arg("config", nargs="?", default="default", help="config (YAML or preset) of the finished run to measure"),
            Arg("--threads", type=int, help="torch/FAISS threads (default: all cores)"),
            Arg("--repeats", type=int, default_from=config, help="timed repetitions (after the warm-up)"),
            Arg("--out", dest="out_dir", default_from=config, help="output folder"),
            SET, QUIET)


COMMANDS = (
    Command("ablate", "", "studies.ablation:cmd_ablate",
            "memory variants of one study, each scored by validation PPL", (
        *RUN, Arg("--study", required=True, choices="studies.ablation:ALL_STUDIES",
                       help="the study whose variants are trained"),
        Arg("--variant", action="append", default=[], metavar="NAME",
            help="train only this variant of the study (repeatable; default: all)"),
        Arg("--out", metavar="DIR", help="also write report.md, results.json and the chart to DIR"))),
    Command("scale-data", "", "studies.data_scaling:cmd_scale_data",
            "quality against corpus size: a run per size, one plot", (
                CONFIG, SET, QUIET,
                Arg("--train-tokens", type=comma_ints, default="40000,120000,0", metavar="N,N,...",
                    help="training-split caps, one run each (0: the whole split)"),
                Arg("--out", dest="out_dir", default="runs/data-scaling",
                    help="folder of the runs (runs/train-N/) and the report"))),
    Command("update-study", "", "studies.update.study:cmd_update_study",
            "synthetic facts: update vs retrain, forget, explain (the maintenance table)", (
                Arg("config", help="YAML of the study (studies/update/configs/study.yaml)"),
                Arg("--out", required=True, help="folder of its runs, report.md and results.json"),
                Arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a study setting, e.g. --set synthetic.num_entities=40"),
                QUIET)),
    Command("update-text", "", "studies.update.text:cmd_update_text",
            "a copy of a Shakespeare run updated with unseen plays: PPL before and after", (
                Arg("run", help="a finished shakespeare-by-play run (e.g. runs/quick); it is copied, not changed"),
                Arg("--out", required=True, help="folder of the updated copy, report.md and results.json"),
                Arg("--plays", type=int, default=1, help="how many unused plays to add"),
                Arg("--add-tokens", type=int, default=16000, help="tokens of each play added"),
                Arg("--eval-tokens", type=int, default=4000, help="the next tokens of each, held out"),
                Arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a maintenance setting, e.g. --set update.replay_ratio=2"),
                Arg("--docs", metavar="DIR", help="also write report.md and results.json there"))),
    Command("eval", "qa", f"{QA}:cmd_eval_qa",
            "EM/F1 of one method on a JSONL of questions", (
                Arg("questions", help='JSONL of {"question": ..., "answers": [...]} (optionally "id")'),
                Arg("--method", choices="mlpmem.baselines.methods:METHODS", default="backbone",
                    help="the compared method"),
                Arg("--run", help="a finished memory run folder (memory, knnlm; LoRA matches its parameters)"),
                Arg("--corpus", help="documents (JSONL with 'text', or text files) for rag-*, cpt, lora"),
                Arg("--lam", type=float, help="mixing weight (default: the run's validation choice)"),
                Arg("--lora-params", type=int, help="LoRA parameter budget when no --run is given"),
                Arg("--backbone", default="smollm2-135m", help="backbone name or folder"),
                Arg("--shots", type=int, default=0, help="format demonstrations before each question (0-8)"),
                Arg("--max-new-tokens", type=int, default_from="studies.qa.eval_qa:GenerationConfig",
                    help="tokens generated per answer"),
                Arg("--batch-size", type=int, default_from="studies.qa.eval_qa:GenerationConfig",
                    help="questions generated at once"),
                Arg("--precision", choices=("fp32", "bf16", "auto"),
                    default_from="studies.qa.eval_qa:GenerationConfig", help="decoding precision"),
                Arg("--out", help="write the score and every prediction to this JSON file"),
                QUIET)),
    Command("report", "qa", f"{QA}:cmd_qa_report",
            "the whole QA comparison, no-regression checks, ablations and report", (
                *RUN,
                Arg("--no-ablations", action="store_true", help="skip the ablation studies"),
                Arg("--no-battery", action="store_true", help="skip the lm-eval battery (finished ones are reported)"),
                Arg("--report-only", action="store_true",
                    help="compute nothing: write the report from what earlier (interrupted) runs finished"))),
    Command("curve", "qa", f"{QA}:cmd_qa_curve",
            "the QA memory's learning curve, epoch by epoch", (
                *RUN[:2],
                Arg("--benchmark", help="the benchmark whose memory is trained (default: the config's first)"),
                Arg("--epochs", type=int, default=12, help="epochs of the one training the curve follows"),
                Arg("--lambdas", type=comma_floats, default="0.2,0.35", metavar="L,L,...",
                    help="memory weights the validation questions are scored at (λ = 0 once)"),
                Arg("--docs", metavar="DIR", help="write report.md, results.json and curve.png here "
                                                 "(default: the curve's folder under out_dir)"),
                QUIET)),
    Command("infer", "bench", f"{BENCH}:bench_infer",
            "time to first token and decode speed: backbone, memory, kNN-LM, RAG", (
                *bench_args(INFER),
                Arg("--prompt-tokens", type=int, default_from=INFER, help="prompt length"),
                Arg("--new-tokens", type=int, default_from=INFER, help="generated tokens per repetition"),
                Arg("--batch-sizes", type=comma_ints, default_from=INFER, help="comma-separated batch sizes"),
                Arg("--warmup", type=int, default_from=INFER, help="discarded warm-up repetitions"),
                Arg("--methods", type=comma_names, default_from=INFER,
                    help="comma-separated subset of backbone,memory,knnlm,rag,knnlm-exact,memory-gate"),
                Arg("--no-ladder", dest="ladder", action="store_false", default=None,
                    help="skip the memory timed without each optimization"),
                Arg("--knn-keys", choices=("bench", "run"), default_from=INFER,
                    help="kNN-LM keys: the run's and other runs' topped up to --knn-min-keys, or the run's alone"),
                Arg("--knn-min-keys", type=int, default_from=f"{KNN}.min_keys", help="keys in the kNN-LM index"),
                Arg("--knn-nlist", type=int, default_from=f"{KNN}.index.nlist", help="IVF lists of the kNN-LM index"),
                Arg("--knn-nprobe", type=int, default_from=f"{KNN}.index.nprobe", help="lists searched per query"),
                Arg("--rag-retriever", choices=("dense", "bm25"), default_from=INFER, help="RAG retriever"),
                Arg("--lam", type=float, help="memory λ (default: the run's, or a fixed one if the run chose 0)"))),
    Command("gate", "bench", "studies.bench.gate_decode:cmd_bench_gate",
            "mlpmem gate, plus the gate's decode speed against the fixed λ in the report", (
                *RUN,
                Arg("--report", metavar="DIR", help="also write the gate report (results.json, report.md, PNG) here"),
                Arg("--name", help="this gate's entry in the report (default: the run folder's name)"),
                Arg("--decode-tokens", type=int, default=32, help="tokens per timed greedy decode"),
                Arg("--decode-rounds", type=int, default=5, help="timed decode rounds, gate and fixed λ interleaved"))),
    Command("offline", "bench", f"{BENCH}:bench_offline",
            "speed of key extraction, teacher and training on a capped corpus slice", (
                *bench_args(OFFLINE),
                Arg("--train-tokens", type=int, default_from=OFFLINE, help="cap of the training split"),
                Arg("--train-steps", type=int, default_from=OFFLINE, help="timed training steps"),
                Arg("--teacher-queries", type=int, default_from=OFFLINE,
                    help="queries of the full-size fp32 vs bf16 teacher search (0 skips)"))),
    Command("packing", "bench", f"{BENCH}:bench_packing",
            "key extraction of short documents: packed rows vs one window per row", (
                Arg("config", nargs="?", default="studies/qa/configs/qa-synthetic.yaml",
                    help="pipeline config: backbone, windows, datastore batch size, precision"),
                Arg("--threads", type=int, help="torch threads (default: all cores)"),
                Arg("--repeats", type=int, default_from=PACKING, help="timed repetitions (after the warm-up)"),
                Arg("--tokens", type=int, default_from=PACKING, help="synthetic-facts tokens encoded per variant"),
                Arg("--docs", dest="docs_dir", default_from=PACKING, help="folder of packing.md and packing.json"))),
    Command("lm-eval", "bench", f"{BENCH}:bench_lm_eval",
            "lm-eval scoring: shared contexts and one backbone pass, same answers", (
                Arg("run", nargs="?", default_from=LM_EVAL_BENCH, help="a finished run"),
                Arg("--methods", type=comma_names, default_from=LM_EVAL_BENCH, help="comma-separated methods"),
                Arg("--limit", type=int, default_from=LM_EVAL_BENCH, help="items per task"),
                Arg("--repeats", type=int, default_from=LM_EVAL_BENCH, help="timed rounds"),
                Arg("--threads", type=int, help="torch threads (default: all cores)"),
                Arg("--tasks-dir", default_from=LM_EVAL_BENCH, help="a prepared task folder (empty: write one)"),
                Arg("--tasks", type=comma_names, default_from=LM_EVAL_BENCH,
                    help="comma-separated tasks or groups of the task folder"),
                Arg("--one-pass-only", action="store_true",
                    help="only backbone/memory/knnlm from one backbone pass vs one at a time"),
                Arg("--compare-precision", choices=("bf16", "auto"), default_from=LM_EVAL_BENCH,
                    help="only backbone/memory/knnlm at fp32 vs this precision (its own --docs folder)"),
                Arg("--profile", action="store_true",
                    help="with --compare-precision: one more round each under torch.profiler, per operator"),
                Arg("--docs", dest="docs_dir", default_from=LM_EVAL_BENCH,
                    help="folder of its report.md and results.json"))),
    Command("scale", "bench", "studies.bench.scale.run:main_from_args",
            "1 vs N processes, peak RSS against datastore size, resume vs rerun", (
                Arg("config", nargs="?", default="quick", help="config (YAML or preset) whose corpus/backbone to use"),
                Arg("--out", default="runs/scale", help="work folder (datastores, teachers, results)"),
                Arg("--tokens", type=int, default=2048, help="training tokens for the 1-vs-N process runs (0: skip)"),
                Arg("--processes", default="1,2", help="process counts to compare"),
                Arg("--sizes", default="60000,240000", help="synthetic datastore sizes (keys) for peak RSS"),
                Arg("--dim", type=int, default=576, help="key size of the synthetic datastores"),
                Arg("--vocab", type=int, default=4096, help="vocabulary of the synthetic datastores"),
                Arg("--train-steps", type=int, default=60, help="training steps measured per size"),
                Arg("--shard-steps", type=int, default=10, help="training steps for DDP vs FSDP (0: skip)"),
                Arg("--shard-width", type=int, default=4096, help="intermediate size of the DDP/FSDP memory"),
                Arg("--corpus-repeats", default="4,16",
                    help="times the training split is repeated for the datastore stage's peak RSS (empty: skip)"),
                Arg("--docs", default="docs/results/scale", help="also write report.md and results.json here"))),
    Command("breakeven", "bench", "studies.bench.breakeven.run:cmd_breakeven",
            "break-even requests: offline cost against per-request savings, per corpus size", (
                Arg("config", help="config (YAML or preset) whose corpus is capped at each size"),
                Arg("--sizes", type=comma_ints, default_from=BREAKEVEN, metavar="N,N,...",
                    help="training-split caps in corpus tokens, one run each"),
                Arg("--out", dest="out_dir", default_from=BREAKEVEN,
                    help="work folder: the runs and what was measured"),
                Arg("--docs", dest="docs_dir", metavar="DIR",
                    help="write report.md, results.json and breakeven.png here (default: the --out folder)"),
                Arg("--prompt-tokens", type=int, default_from=BREAKEVEN, help="P: prompt tokens of a request"),
                Arg("--new-tokens", type=int, default_from=BREAKEVEN, help="N: tokens a request generates"),
                Arg("--serving-batch", type=int, default_from=BREAKEVEN,
                    help="batch size timed beside batch 1 (1: batch 1 only)"),
                Arg("--repeats", type=int, default_from=BREAKEVEN, help="timed repetitions (after the warm-up)"),
                Arg("--warmup", type=int, default_from=BREAKEVEN, help="discarded warm-up repetitions"),
                Arg("--rag-retriever", choices=("dense", "bm25"), default_from=BREAKEVEN, help="RAG retriever"),
                Arg("--ivfpq-min-keys", type=int, default_from=BREAKEVEN,
                    help="time kNN-LM with IVF-PQ too from this many datastore keys"),
                Arg("--pq-bytes", type=int, default_from=BREAKEVEN, help="bytes per IVF-PQ code"),
                Arg("--nprobe", type=int, default_from=BREAKEVEN, help="IVF lists searched per query"),
                Arg("--search-keys", type=comma_ints, default_from=BREAKEVEN, metavar="N,N,...",
                    help="also time kNN-LM's decode over this many keys each (the largest size's datastore topped up "
                         "with synthetic keys: search cost only)"),
                Arg("--finetune", type=comma_names, default_from=BREAKEVEN,
                    help="fine-tuned baselines whose training is timed at each size (cpt,lora or none)"),
                Arg("--threads", type=int, help="torch/FAISS threads (default: all cores)"),
                SET, QUIET)),
    Command("list", "tasks", "studies.tasks.cli:cmd_list",
            "BIG-bench multiple-choice tasks, their sizes, the selection rule's verdict", (
                Arg("--all", action="store_true", help="also the rejected tasks, with the reason"),
                Arg("--out", help="also write report.md and results.json to this folder"))),
    Command("screen", "tasks", "studies.tasks.cli:cmd_screen",
            "score candidate tasks with the backbone; choose the nine above chance", (
                Arg("--tasks", type=comma_names,
                    help="comma-separated BIG-bench tasks (default: the rule's candidates)"),
                Arg("--items", type=int, default_from="studies.tasks.screen:ScreenConfig",
                    help="items per task"),
                Arg("--mc-limit", type=int, default_from="studies.tasks.screen:ScreenConfig",
                    help="items per task that prepare evaluates (kept out of the screen)"),
                Arg("--backbone", help="backbone name or folder (default: the shipped SmolLM2-135M)"),
                Arg("--batch-size", type=int, default_from="studies.tasks.screen:ScreenConfig",
                    help="requests per forward"),
                Arg("--seed", type=int, help="seed of the item order"),
                Arg("--out", help="folder of screen.json (default: ~/.cache/mlpmem/lm-eval-tasks-screen)"),
                QUIET)),
    Command("prepare", "tasks", "studies.tasks.cli:cmd_prepare",
            "write the local lm-eval tasks from installable data", (
                Arg("--out", help="task folder (default: ~/.cache/mlpmem/lm-eval-tasks)"),
                Arg("--battery-limit", type=int, default_from="studies.tasks.prepare:TasksConfig",
                    help="items per task of the installable battery mlpmem_battery (0: none)"),
                Arg("--detect-limit", type=int, default_from="studies.tasks.prepare:TasksConfig",
                    help="items per task of HaluEval's detection mlpmem_halueval_detect (0: none)"),
                Arg("--preference-data", metavar="DATA",
                    help="a halueval_qa benchmark's data folder: its questions as mlpmem_halueval_prefer"),
                Arg("--qa-config", help="QA suite YAML whose questions become generation tasks"),
                Arg("--mc-tasks", type=comma_names,
                    help="comma-separated BIG-bench tasks (needs MLPMEM_BIGBENCH_ARCHIVE)"),
                Arg("--screen", metavar="SCREEN_JSON", help="BIG-bench: take the nine tasks a screen chose"),
                Arg("--mc-limit", type=int, default_from="studies.tasks.prepare:TasksConfig",
                    help="items per BIG-bench multiple-choice task"),
                Arg("--truthfulness", type=comma_names,
                    help="BIG-bench truthfulness tasks, e.g. truthful_qa (needs MLPMEM_BIGBENCH_ARCHIVE)"),
                Arg("--qa-wikidata", type=int, default_from="studies.tasks.prepare:TasksConfig",
                    help="BIG-bench qa_wikidata cloze facts (0: none; needs MLPMEM_BIGBENCH_ARCHIVE)"),
                Arg("--seed", type=int, help="seed of every subset"))),
)

DESCRIPTION = """The studies built on mlpmem: QA suite, speed benchmarks, local lm-eval tasks, ablations, data scaling,
update studies. Run from the repository's root. `python -m studies COMMAND --help` for each."""

PROGRAM = Program(NAME, DESCRIPTION, COMMANDS, GROUPS)


def main(argv: list[str] | None = None) -> int:
    """Run one ``python -m studies`` command (see :func:`mlpmem.cli.spec.run`)."""
    return run(PROGRAM, argv)
