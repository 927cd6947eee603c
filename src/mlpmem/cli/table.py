"""Every command of ``mlpmem``, one entry each: name, group, function, help and arguments, declared once.

The functions are ``"module:function"`` strings and the references in arguments are resolved only when that
command runs or shows its help (see :mod:`mlpmem.cli.spec`), so this module imports nothing of the project.
"""

from __future__ import annotations

from mlpmem.cli.spec import Arg, Command, comma_names

GROUPS = {
    "": "the pipeline",
}

CONFIG = Arg("config", help="a YAML file, or the name of a preset shipped with mlpmem (tiny, quick, default, ...)")
SET = Arg("--set", action="append", default=[], metavar="KEY=VALUE",
          help="override a config value, e.g. --set teacher.k=256")
REBUILD = Arg("--rebuild", action="store_true", help="rebuild stages even if complete")
QUIET = Arg("--quiet", action="store_true", help="no progress bars")
RUN = (CONFIG, SET, REBUILD, QUIET)
"""A finished or resumable run: ``CONFIG [--set KEY=VALUE ...] [--rebuild] [--quiet]``."""

STAGES = "mlpmem.cli.stages"
TOOLS = "mlpmem.cli.tools"


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
    Command("record-checksums", "", "mlpmem.cli.checksums:record_checksums",
            "record the missing checksums of a memory you know is right",
            (Arg("folder", help="a run folder or a saved memory-augmented model"),)),
    Command("gate", "", "mlpmem.cli.gate:gate",
            "train a run's learned mixing gate λ_t and compare it with the fixed λ", (
                *RUN,
                Arg("--report", metavar="DIR", help="also write the gate report (results.json, report.md, PNG) here"),
                Arg("--name", help="this gate's entry in the report (default: the run folder's name)"))),
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
    Command("compare", "", "mlpmem.cli.compare:compare",
            "paired method-vs-base Δ from lm-eval samples, its interval, verdict, plot", (
                Arg("--base", required=True, help="lm-eval results JSON of the base (mlpmem lm-eval --output)"),
                Arg("--method", action="append", required=True, help="lm-eval results JSON of a method (repeat)"),
                Arg("--names", type=comma_names, help="comma-separated method names (default: the file names)"),
                Arg("--base-name", default="base", help="the base's name in the table"),
                Arg("--tasks", type=comma_names, help="comma-separated tasks (default: every task both hold)"),
                Arg("--resamples", type=int, default=10000, help="bootstrap resamples"),
                Arg("--seed", type=int, default=0, help="bootstrap seed"),
                Arg("--out", help="also write compare.md, compare.json and delta.png here"))),
]

COMMANDS: list[Command] = PIPELINE
