"""Every command of ``mlpmem``, one entry each: name, group, function, help and arguments, declared once.

The functions are ``"module:function"`` strings and the references in arguments are resolved only when that
command runs or shows its help (see :mod:`mlpmem.cli.spec`), so this module imports nothing of the project.
"""

from __future__ import annotations

from mlpmem.cli.spec import Arg, Command

GROUPS = {
    "": "the pipeline",
    "qa": "knowledge QA: EM/F1 of one method, the whole comparison",
    "bench": "speed benchmarks: inference, offline stages, packing, scale",
    "mosaics": "the Memory Mosaics v2 experiment",
    "tasks": "local lm-eval tasks from shipped data, and the paired comparison of methods on them",
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _names(text: str) -> list[str]:
    return text.split(",")


def _config(**options) -> Arg:
    return Arg("config", help="a YAML file, or the name of a preset shipped with mlpmem (tiny, quick, default, ...)",
               **options)


SET = Arg("--set", action="append", default=[], metavar="KEY=VALUE",
          help="override a config value, e.g. --set teacher.k=256")
REBUILD = Arg("--rebuild", action="store_true", help="rebuild stages even if complete")
QUIET = Arg("--quiet", action="store_true", help="no progress bars")
RUN = (_config(), SET, REBUILD, QUIET)
"""A finished or resumable run: ``CONFIG [--set KEY=VALUE ...] [--rebuild] [--quiet]``."""

STAGES = "mlpmem.cli.stages"
TOOLS = "mlpmem.cli.tools"
QA = "mlpmem.experiments.qa.cli"
BENCH = "mlpmem.experiments.bench.cli"
INFER = "mlpmem.experiments.bench.infer.config:InferBenchConfig"
OFFLINE = "mlpmem.experiments.bench.offline:OfflineBenchConfig"
PACKING = "mlpmem.experiments.bench.packing:PackingBenchConfig"
LM_EVAL_BENCH = "mlpmem.experiments.bench.lm_eval_contexts:LmEvalBenchConfig"
KNN = "mlpmem.experiments.bench.knn_setup:KnnSetupConfig"
MOSAICS = "mlpmem.experiments.mosaics.cli"
MODEL = Arg("--model", choices="mlpmem.experiments.mosaics.cli:MODELS", default="both",
            help="which model(s): Memory Mosaics, the matched Transformer, or both")


def _maintenance(*extra: Arg) -> tuple[Arg, ...]:
    """The arguments of ``update``, ``forget`` and ``explain``: ``RUN`` and the maintenance settings."""
    return (Arg("run", help="a finished run folder (its config.yaml says how it was built)"), *extra,
            Arg("--config", default="maintenance",
                help="YAML of the maintenance settings, or the name of a preset shipped with mlpmem"),
            Arg("--set", action="append", default=[], metavar="KEY=VALUE",
                help="override a maintenance setting, e.g. --set update.replay_ratio=2"),
            Arg("--backbone", help="the run's backbone under another name or folder (its fingerprint is checked)"),
            QUIET)


ABORT = Arg("--abort", action="store_true", help="discard an unfinished update or forget instead")


def _bench(config: str) -> tuple[Arg, ...]:
    """The options shared by ``bench infer`` and ``bench offline``; left out, ``config``'s defaults apply."""
    return (Arg("config", nargs="?", default="default", help="config (YAML or preset) of the finished run to measure"),
            Arg("--threads", type=int, help="torch/FAISS threads (default: all cores)"),
            Arg("--repeats", type=int, default_from=config, help="timed repetitions (after the warm-up)"),
            Arg("--out", dest="out_dir", default_from=config, help="output folder"),
            SET, QUIET)


PIPELINE = [
    Command("run", "", f"{STAGES}:run", "run every stage of a config and print the results table",
            (*RUN, Arg("--reuse-from", metavar="RUN",
                       help="take the datastore, kNN-LM lists and teacher of this run where built from the same "
                            "settings"))),
    Command("datastore", "", f"{STAGES}:datastore",
            "build the datastore (training keys) and the evaluation keystores", RUN),
    Command("knnlm", "", f"{STAGES}:knnlm",
            "kNN-LM baseline: sweep k, T, lambda on validation, report test perplexity", RUN),
    Command("teacher", "", f"{STAGES}:teacher",
            "build the sparse kNN teacher (self excluded) for every datastore position", RUN),
    Command("train", "", f"{STAGES}:train", "train the MLP Memory on the datastore keys and the sparse teacher", RUN),
    Command("eval", "", f"{STAGES}:evaluate",
            "test table, lambda curve, distribution statistics and report of a run", RUN),
    Command("report", "", f"{STAGES}:report",
            "rewrite a run's report.md and figures from its results.json (no recomputation)", RUN),
    Command("generate", "", f"{STAGES}:generate", "continue a prompt with the memory-augmented model of a run", (
        *RUN,
        Arg("--prompt", required=True, help="the text to continue"),
        Arg("--lam", type=float, help="memory weight (default: the λ chosen on validation)"),
        Arg("--gate", action="store_true", help="mix with the run's learned gate λ_t (mlpmem gate) instead of one λ"),
        Arg("--max-new-tokens", type=int, default=40, help="tokens generated"),
        Arg("--sample", action="store_true", help="nucleus sampling instead of greedy decoding"))),
    Command("demo", "", f"{STAGES}:demo", "the whole pipeline on the shipped default", (
        Arg("--mode", choices=("quick", "full"), default="quick",
            help="the preset run: quick (minutes) or default"),
        SET, REBUILD, QUIET)),
    Command("corpora", "", f"{TOOLS}:corpora", "list the shipped corpora"),
    Command("prepare-corpus", "", f"{TOOLS}:prepare_corpus",
            "prepare a shipped corpus into train/validation/test JSONL", (
                Arg("name", help="a shipped corpus (see mlpmem corpora)"),
                Arg("--seed", type=int, default=0, help="seed of the document order"))),
    Command("summarize", "", f"{TOOLS}:summarize", "one table over several finished run folders", (
        Arg("runs", nargs="+", help="run folders"),
        Arg("--out", help="also write the table to this Markdown file"),
        Arg("--copy-reports", metavar="DIR", help="copy each run's report.md and figures to DIR/<run>/"))),
    Command("ablate", "", f"{STAGES}:ablate", "memory variants of one study, each scored by validation PPL", (
        *RUN, Arg("--study", required=True, choices="mlpmem.experiments.ablation:ALL_STUDIES",
                       help="the study whose variants are trained"),
        Arg("--variant", action="append", default=[], metavar="NAME",
            help="train only this variant of the study (repeatable; default: all)"),
        Arg("--out", metavar="DIR", help="also write report.md, results.json and the chart to DIR"))),
    Command("gate", "", "mlpmem.cli.gate:gate",
            "train a run's learned mixing gate λ_t and compare it with the fixed λ", (
                *RUN,
                Arg("--report", metavar="DIR", help="also write the gate report (results.json, report.md, PNG) here"),
                Arg("--name", help="this gate's entry in the report (default: the run folder's name)"),
                Arg("--decode-tokens", type=int, default=32, help="tokens per timed greedy decode (0: no timing)"),
                Arg("--decode-rounds", type=int, default=5, help="timed decode rounds, gate and fixed λ interleaved"))),
    Command("scale-data", "", "mlpmem.experiments.data_scaling:cmd_scale_data",
            "quality against corpus size: a run per size, one plot", (
                _config(), SET, QUIET,
                Arg("--train-tokens", type=_ints, default="40000,120000,0", metavar="N,N,...",
                    help="training-split caps, one run each (0: the whole split)"),
                Arg("--out", dest="out_dir", default="runs/data-scaling",
                    help="folder of the runs (runs/train-N/) and the report"))),
    Command("update", "", "mlpmem.cli.maintenance:update",
            "add documents to a finished run without rebuilding it", _maintenance(
                Arg("--add", metavar="DOCS", help="a .jsonl of {'text', 'id'} or a text file, one document a line"),
                ABORT)),
    Command("forget", "", "mlpmem.cli.maintenance:forget",
            "remove documents from a finished run and from its memory", _maintenance(
                Arg("--docs", metavar="IDS", help="comma-separated document ids or names"),
                Arg("--probes", metavar="FILE", help="prompts where the forgotten knowledge must not surface either "
                    "(.jsonl of {'text'} or one prompt a line): taught the backbone's distribution too"), ABORT)),
    Command("explain", "", "mlpmem.cli.maintenance:explain",
            "the training documents behind each prediction of a run's memory", _maintenance(
                Arg("--prompt", required=True, help="the text to explain"),
                Arg("--max-new-tokens", type=int, default=0, help="also generate and explain this many tokens"),
                Arg("--html", metavar="PATH", help="also write the explanation as an HTML page"),
                Arg("--json", metavar="PATH", help="also write it as JSON"))),
    Command("update-study", "", "mlpmem.experiments.update.study:cmd_update_study",
            "synthetic facts: update vs retrain, forget, explain (the maintenance table)", (
                Arg("config", help="YAML of the study (configs/maintenance/study.yaml)"),
                Arg("--out", required=True, help="folder of its runs, report.md and results.json"),
                Arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a study setting, e.g. --set synthetic.num_entities=40"),
                QUIET)),
    Command("update-text", "", "mlpmem.experiments.update.text:cmd_update_text",
            "a copy of a Shakespeare run updated with unseen plays: PPL before and after", (
                Arg("run", help="a finished shakespeare-by-play run (e.g. runs/quick); it is copied, not changed"),
                Arg("--out", required=True, help="folder of the updated copy, report.md and results.json"),
                Arg("--plays", type=int, default=1, help="how many unused plays to add"),
                Arg("--add-tokens", type=int, default=16000, help="tokens of each play added"),
                Arg("--eval-tokens", type=int, default=4000, help="the next tokens of each, held out"),
                Arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a maintenance setting, e.g. --set update.replay_ratio=2"),
                Arg("--docs", metavar="DIR", help="also write report.md and results.json there"))),
    Command("lm-eval", "", "mlpmem.cli.harness:lm_eval",
            "lm-evaluation-harness on any compared method of a run (docs/lm-eval.md)", (
                Arg("--tasks", required=True, help="comma-separated lm-eval task names"),
                Arg("--model", default="mlpmem", help="lm-eval model type: mlpmem, or hf on a saved folder"),
                Arg("--model-args", help="e.g. run=runs/quick,lam=auto,method=memory"),
                Arg("--methods", help="backbone,memory,knnlm of the run in --model-args, scored from one backbone "
                                      "pass (--output is then a folder of <method>.json)"),
                Arg("--include-path", help="folder of local task YAML files"),
                Arg("--local-only", action="store_true", help="index only the --include-path tasks (faster)"),
                Arg("--limit", type=float, help="items per task (a fraction if below 1)"),
                Arg("--num-fewshot", type=int, help="few-shot examples per item"),
                Arg("--batch-size", default="1", help="requests per forward, or auto"),
                Arg("--device", help="cpu, cuda, cuda:1... (default: cuda if there is one, else cpu)"),
                Arg("--log-samples", action="store_true", help="keep every request and response in --output"),
                Arg("--output", help="write lm-eval's results to this JSON file"))),
]

EXPERIMENTS = [
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
                Arg("--max-new-tokens", type=int, default_from="mlpmem.experiments.qa.eval_qa:GenerationConfig",
                    help="tokens generated per answer"),
                Arg("--batch-size", type=int, default_from="mlpmem.experiments.qa.eval_qa:GenerationConfig",
                    help="questions generated at once"),
                Arg("--precision", choices=("fp32", "bf16", "auto"),
                    default_from="mlpmem.experiments.qa.eval_qa:GenerationConfig", help="decoding precision"),
                Arg("--out", help="write the score and every prediction to this JSON file"),
                QUIET), aliases=("eval-qa",)),
    Command("report", "qa", f"{QA}:cmd_qa_report",
            "the whole QA comparison, no-regression checks, ablations and report", (
                *RUN,
                Arg("--no-ablations", action="store_true", help="skip the ablation studies"),
                Arg("--no-battery", action="store_true", help="skip the lm-eval battery (finished ones are reported)"),
                Arg("--report-only", action="store_true",
                    help="compute nothing: write the report from what earlier (interrupted) runs finished")),
            aliases=("qa-report",)),
    Command("infer", "bench", f"{BENCH}:bench_infer",
            "time to first token and decode speed: backbone, memory, kNN-LM, RAG", (
                *_bench(INFER),
                Arg("--prompt-tokens", type=int, default_from=INFER, help="prompt length"),
                Arg("--new-tokens", type=int, default_from=INFER, help="generated tokens per repetition"),
                Arg("--batch-sizes", type=_ints, default_from=INFER, help="comma-separated batch sizes"),
                Arg("--warmup", type=int, default_from=INFER, help="discarded warm-up repetitions"),
                Arg("--methods", type=_names, default_from=INFER,
                    help="comma-separated subset of backbone,memory,knnlm,rag,knnlm-exact,memory-gate"),
                Arg("--no-ladder", dest="ladder", action="store_false", default=None,
                    help="skip the memory timed without each optimization"),
                Arg("--knn-min-keys", type=int, default_from=f"{KNN}.min_keys", help="keys in the kNN-LM index"),
                Arg("--knn-nlist", type=int, default_from=f"{KNN}.index.nlist", help="IVF lists of the kNN-LM index"),
                Arg("--knn-nprobe", type=int, default_from=f"{KNN}.index.nprobe", help="lists searched per query"),
                Arg("--rag-retriever", choices=("dense", "bm25"), default_from=INFER, help="RAG retriever"),
                Arg("--lam", type=float, help="memory λ (default: the run's, or a fixed one if the run chose 0)")),
            aliases=("bench-infer",)),
    Command("offline", "bench", f"{BENCH}:bench_offline",
            "speed of key extraction, teacher and training on a capped corpus slice", (
                *_bench(OFFLINE),
                Arg("--train-tokens", type=int, default_from=OFFLINE, help="cap of the training split"),
                Arg("--train-steps", type=int, default_from=OFFLINE, help="timed training steps"),
                Arg("--teacher-queries", type=int, default_from=OFFLINE,
                    help="queries of the full-size fp32 vs bf16 teacher search (0 skips)")),
            aliases=("bench-offline",)),
    Command("packing", "bench", f"{BENCH}:bench_packing",
            "key extraction of short documents: packed rows vs one window per row", (
                Arg("config", nargs="?", default="configs/qa-synthetic.yaml",
                    help="pipeline config: backbone, windows, datastore batch size, precision"),
                Arg("--threads", type=int, help="torch threads (default: all cores)"),
                Arg("--repeats", type=int, default_from=PACKING, help="timed repetitions (after the warm-up)"),
                Arg("--tokens", type=int, default_from=PACKING, help="synthetic-facts tokens encoded per variant"),
                Arg("--docs", dest="docs_dir", default_from=PACKING, help="folder of packing.md and packing.json"))),
    Command("lm-eval", "bench", f"{BENCH}:bench_lm_eval",
            "lm-eval scoring: shared contexts and one backbone pass, same answers", (
                Arg("run", nargs="?", default_from=LM_EVAL_BENCH, help="a finished run"),
                Arg("--methods", type=_names, default_from=LM_EVAL_BENCH, help="comma-separated methods"),
                Arg("--limit", type=int, default_from=LM_EVAL_BENCH, help="items per task"),
                Arg("--repeats", type=int, default_from=LM_EVAL_BENCH, help="timed rounds"),
                Arg("--threads", type=int, help="torch threads (default: all cores)"),
                Arg("--tasks-dir", default_from=LM_EVAL_BENCH, help="a prepared task folder (empty: write one)"),
                Arg("--one-pass-only", action="store_true",
                    help="only backbone/memory/knnlm from one backbone pass vs one at a time"),
                Arg("--compare-precision", choices=("bf16", "auto"), default_from=LM_EVAL_BENCH,
                    help="only backbone/memory/knnlm at fp32 vs this precision (lm-eval-precision.md)"),
                Arg("--profile", action="store_true",
                    help="with --compare-precision: one more round each under torch.profiler, per operator"),
                Arg("--docs", dest="docs_dir", default_from=LM_EVAL_BENCH,
                    help="folder of lm-eval-contexts.md and .json"))),
    Command("scale", "bench", "mlpmem.experiments.bench.scale.run:main_from_args",
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
                Arg("--docs", default="docs/results/scale", help="also write report.md and results.json here")),
            aliases=("bench-scale",)),
    Command("train", "mosaics", f"{MOSAICS}:cmd_mosaics_train",
            "Memory Mosaics v2 and its matched Transformer: data, tokenizer, training", (*RUN, MODEL),
            aliases=("mosaics-train",)),
    Command("eval", "mosaics", f"{MOSAICS}:cmd_mosaics_eval",
            "Memory Mosaics v2 vs Transformer: the three questions, table and plot", (*RUN, MODEL),
            aliases=("mosaics-eval",)),
    Command("memory", "mosaics", f"{MOSAICS}:cmd_mosaics_memory",
            "an MLP Memory on top of each trained Mosaics/Transformer model", (*RUN, MODEL),
            aliases=("mosaics-memory",)),
    Command("recall", "mosaics", f"{MOSAICS}:cmd_mosaics_recall",
            "planted key-value recall: tiny Memory Mosaics vs Transformers", (
                Arg("--steps", type=int, default_from="mlpmem.experiments.mosaics.recall:compare",
                    help="training steps of each tiny model"),
                Arg("--out", help="also write report.md and results.json to this folder")),
            aliases=("mosaics-recall",)),
    Command("list", "tasks", "mlpmem.experiments.tasks.cli:cmd_list",
            "BIG-bench multiple-choice tasks, their sizes, the selection rule's verdict", (
                Arg("--all", action="store_true", help="also the rejected tasks, with the reason"),
                Arg("--out", help="also write report.md and results.json to this folder"))),
    Command("screen", "tasks", "mlpmem.experiments.tasks.cli:cmd_screen",
            "score candidate tasks with the backbone; choose the nine above chance", (
                Arg("--tasks", type=_names, help="comma-separated BIG-bench tasks (default: the rule's candidates)"),
                Arg("--items", type=int, default_from="mlpmem.experiments.tasks.screen:ScreenConfig",
                    help="items per task"),
                Arg("--mc-limit", type=int, default_from="mlpmem.experiments.tasks.screen:ScreenConfig",
                    help="items per task that prepare evaluates (kept out of the screen)"),
                Arg("--backbone", help="backbone name or folder (default: the shipped SmolLM2-135M)"),
                Arg("--batch-size", type=int, default_from="mlpmem.experiments.tasks.screen:ScreenConfig",
                    help="requests per forward"),
                Arg("--seed", type=int, help="seed of the item order"),
                Arg("--out", help="folder of screen.json (default: ~/.cache/mlpmem/lm-eval-tasks-screen)"),
                QUIET)),
    Command("prepare", "tasks", "mlpmem.experiments.tasks.cli:cmd_prepare",
            "write the local lm-eval tasks (BIG-bench MC, QA, cloze) from shipped data", (
                Arg("--out", help="task folder (default: ~/.cache/mlpmem/lm-eval-tasks)"),
                Arg("--screen", metavar="SCREEN_JSON", help="take the nine tasks a screen chose"),
                Arg("--mc-tasks", type=_names, help="comma-separated BIG-bench tasks instead"),
                Arg("--mc-limit", type=int, default_from="mlpmem.experiments.tasks.prepare:TasksConfig",
                    help="items per multiple-choice task"),
                Arg("--qa-config", default_from="mlpmem.experiments.tasks.prepare:TasksConfig",
                    help="QA suite YAML whose questions become generation tasks"),
                Arg("--no-qa", action="store_true", help="no QA generation tasks"),
                Arg("--no-truthfulness", action="store_true", help="no truthfulness group (TruthfulQA MC)"),
                Arg("--qa-wikidata", type=int, default_from="mlpmem.experiments.tasks.prepare:TasksConfig",
                    help="qa_wikidata cloze facts (0: none)"),
                Arg("--seed", type=int, help="seed of the multiple-choice and cloze subsets"))),
    Command("compare", "tasks", "mlpmem.cli.compare:compare",
            "paired method-vs-base Δ from lm-eval samples, its interval, verdict, plot", (
                Arg("--base", required=True, help="lm-eval results JSON of the base (mlpmem lm-eval --output)"),
                Arg("--method", action="append", required=True, help="lm-eval results JSON of a method (repeat)"),
                Arg("--names", type=_names, help="comma-separated method names (default: the file names)"),
                Arg("--base-name", default="base", help="the base's name in the table"),
                Arg("--tasks", type=_names, help="comma-separated tasks (default: every task both hold)"),
                Arg("--resamples", type=int, default=10000, help="bootstrap resamples"),
                Arg("--seed", type=int, default=0, help="bootstrap seed"),
                Arg("--out", help="also write compare.md, compare.json and delta.png here"))),
]

COMMANDS: list[Command] = [*PIPELINE, *EXPERIMENTS]
ALIASES: dict[str, list[str]] = {alias: c.path for c in COMMANDS for alias in c.aliases}
"""Old flat name -> the command's words, e.g. ``bench-infer`` -> ``["bench", "infer"]``."""
