"""The whole QA comparison from scratch: data, the memory of each benchmark, every method, no-regression, ablations.

For each benchmark (``synthetic``, ``disfl_qa``) in ``out_dir/<benchmark>/``:

  1. ``data/``: the memory corpus as ``corpus/{train,validation,test}.jsonl`` and the questions as
     ``questions/{validation,test[,held_out]}.jsonl`` (validation questions tune λ and nothing else);
  2. ``memory-run/``: the project's own pipeline on that corpus (datastore → kNN-LM sweep → teacher →
     memory → perplexity evaluation), from the benchmark's pipeline YAML (``configs/qa-<benchmark>.yaml``);
  3. ``methods/<method>.json``: EM / F1 of each method on the same questions — base, RAG (dense, BM25)
     over the same corpus, kNN-LM on the run's datastore, CPT and LoRA trained on the same corpus, and
     MLP Memory; mixing methods get λ tuned on the validation questions. Every method file is written
     when its method finishes, so an interrupted suite resumes where it stopped.

The no-regression checks (``qa_wikidata`` cloze facts, multiple-choice tasks by log-likelihood and PMI)
run on the models of one benchmark (``no_regression.memory_from``). The ablations run the project's
ablation studies on their own pipeline config. Everything lands in ``out_dir/results.json``; the
report (:mod:`mlpmem.experiments.qa.report`) is written from it.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlpmem.baselines.cpt import FinetuneConfig
from mlpmem.baselines.lora import LoRAConfig
from mlpmem.baselines.rag import RAGConfig
from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.experiments.qa.eval_qa import GenerationConfig
from mlpmem.utils.shards import read_json, write_json

BENCHMARKS = ("synthetic", "disfl_qa")
METHODS = ("base", "rag-dense", "rag-bm25", "knnlm", "cpt", "lora", "memory")
MIXED = ("knnlm", "memory")


@dataclass
class BenchmarkConfig(Config):
    pipeline: str
    """PipelineConfig YAML of this benchmark's memory (its run_dir and corpus.path are set by the suite)."""
    options: dict = field(default_factory=dict)
    """Generator options: SyntheticConfig fields, or ``max_paragraphs`` / ``heldout_paragraphs`` for disfl_qa."""
    tune_questions: int = 80
    test_questions: int = 240


@dataclass
class NoRegressionConfig(Config):
    memory_from: str = "disfl_qa"
    """The benchmark whose models (memory, kNN-LM datastore, CPT, LoRA) are checked."""
    qa_wikidata: int = 300
    mc_tasks: list[str] = field(default_factory=lambda: ["general_knowledge", "hindu_knowledge",
                                                         "physical_intuition"])
    mc_limit: int = 100
    methods: list[str] = field(default_factory=lambda: ["base", "knnlm", "cpt", "lora", "memory"])

    def validate(self) -> None:
        if self.memory_from not in BENCHMARKS:
            raise ConfigError(f"no_regression.memory_from must be one of {BENCHMARKS}")
        allowed = {"base", "knnlm", "cpt", "lora", "memory"}
        if set(self.methods) - allowed:
            raise ConfigError(f"no_regression.methods must be among {sorted(allowed)}, got {self.methods}")


@dataclass
class AblationSuiteConfig(Config):
    pipeline: str = "configs/qa-ablate.yaml"
    studies: list[str] = field(default_factory=lambda: ["alpha", "layer", "size", "teacher"])


@dataclass
class QASuiteConfig(Config):
    out_dir: str = "runs/qa"
    docs_dir: str = "docs/results/qa"
    backbone: str = "smollm2-135m"
    seed: int = 0
    benchmarks: dict = field(default_factory=dict)
    """``{synthetic: {...}, disfl_qa: {...}}`` (BenchmarkConfig fields)."""
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    lambda_grid: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.5, 0.7])
    shots: int = 0
    """Format demonstrations before every QA prompt, the same for every method (:mod:`mlpmem.inference.prompts`)."""
    rag: RAGConfig = field(default_factory=RAGConfig)
    cpt: FinetuneConfig = field(default_factory=FinetuneConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    no_regression: NoRegressionConfig = field(default_factory=NoRegressionConfig)
    ablations: AblationSuiteConfig | None = field(default_factory=AblationSuiteConfig)

    def validate(self) -> None:
        from mlpmem.inference.mixing import check_lambda

        bad = set(self.benchmarks) - set(BENCHMARKS)
        if bad or not self.benchmarks:
            raise ConfigError(f"qa benchmarks must be a non-empty subset of {BENCHMARKS}, got {sorted(bad)}")
        self.benchmarks = {k: v if isinstance(v, BenchmarkConfig) else BenchmarkConfig(**v)
                           for k, v in self.benchmarks.items()}
        if set(self.methods) - set(METHODS) or "base" not in self.methods:
            raise ConfigError(f"qa methods must include base and be among {METHODS}")
        for lam in self.lambda_grid:
            check_lambda(lam, "qa lambda_grid")
        from mlpmem.inference.prompts import demonstrations

        demonstrations(self.shots)  # validates the range
        if isinstance(self.ablations, dict):
            self.ablations = AblationSuiteConfig(**self.ablations)



# ---------------------------------------------------------------------------------------------
# Data


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def prepare_synthetic(options: dict, out: Path) -> Path:
    from mlpmem.experiments.qa.synthetic import (
        SyntheticConfig,
        generate,
        write_benchmark,
    )

    return write_benchmark(generate(SyntheticConfig(**options)), out)


def prepare_disfl_qa(options: dict, out: Path, seed: int) -> Path:
    """Memory corpus = ``max_paragraphs`` paragraphs; two further sets of ``heldout_paragraphs`` paragraphs
    give the validation/test corpus (perplexity on unseen Wikipedia text); questions over the memory
    paragraphs are split by paragraph into validation (25 %) and test."""
    from mlpmem.experiments.qa.bigbench import disfl_qa

    n, held = int(options.get("max_paragraphs", 100)), int(options.get("heldout_paragraphs", 20))
    paragraphs, questions = disfl_qa(max_paragraphs=n + 2 * held, seed=seed)
    rng = random.Random(f"disfl-qa-split:{seed}")
    rng.shuffle(paragraphs)
    corpus = {"train": paragraphs[:n], "validation": paragraphs[n : n + held], "test": paragraphs[n + held :]}
    for split, rows in corpus.items():
        _write_jsonl(out / "corpus" / f"{split}.jsonl", rows)
    train_ids = [p["id"] for p in corpus["train"]]
    val_ids = set(rng.sample(train_ids, max(1, len(train_ids) // 4)))
    qs = {"validation": [], "test": []}
    for q in questions:
        if q["paragraph"] in set(train_ids):
            qs["validation" if q["paragraph"] in val_ids else "test"].append(q)
    for split, rows in qs.items():
        _write_jsonl(out / "questions" / f"{split}.jsonl", rows)
    (out / "meta.json").write_text(json.dumps({"paragraphs": {k: len(v) for k, v in corpus.items()},
                                               "questions": {k: len(v) for k, v in qs.items()}}, indent=1))
    return out


def prepare_data(name: str, bench: BenchmarkConfig, out: Path, seed: int) -> Path:
    if (out / "meta.json").exists():
        return out
    return prepare_synthetic(bench.options, out) if name == "synthetic" else prepare_disfl_qa(bench.options, out, seed)


def question_splits(data: Path, bench: BenchmarkConfig) -> dict[str, list[dict]]:
    out = {"validation": read_jsonl(data / "questions" / "validation.jsonl")[: bench.tune_questions],
           "test": read_jsonl(data / "questions" / "test.jsonl")[: bench.test_questions]}
    held = data / "questions" / "held_out.jsonl"
    if held.exists():
        out["held_out"] = read_jsonl(held)[: bench.test_questions]
    return out


# ---------------------------------------------------------------------------------------------
# Methods


class Context:
    """What every method of one benchmark shares: backbone, memory run, corpus, questions, config."""

    def __init__(self, cfg: QASuiteConfig, name: str, backbone, progress: bool = True):
        from mlpmem.experiments.qa.eval_qa import prompt_builder
        from mlpmem.pipeline.config import PipelineConfig
        from mlpmem.pipeline.run import Run

        self.cfg, self.name, self.progress = cfg, name, progress
        self.bench = cfg.benchmarks[name]
        self.dir = Path(cfg.out_dir) / name
        self.data = prepare_data(name, self.bench, self.dir / "data", cfg.seed)
        pcfg = PipelineConfig.from_yaml(self.bench.pipeline, [f"run_dir={self.dir / 'memory-run'}",
                                                              f"corpus.path={self.data / 'corpus'}",
                                                              "corpus.name=null"])
        self.run = Run(pcfg, progress)
        self.run._backbone = backbone
        self.model, self.tokenizer = backbone
        self.docs = read_jsonl(self.data / "corpus" / "train.jsonl")
        self.questions = question_splits(self.data, self.bench)
        self.prompts = prompt_builder(cfg.shots)

    def memory_results(self) -> dict:
        from mlpmem.pipeline import run_pipeline

        path = self.run.path("results.json")
        if not path.exists() or not self.run.path("memory", "config.json").exists():
            run_pipeline(self.run)
        return read_json(path, "memory run results")


def _evaluate_splits(ctx: Context, model, prompt_fn, splits=("test", "held_out")) -> dict:
    from mlpmem.experiments.qa.eval_qa import evaluate_questions

    out = {}
    for split in splits:
        if split in ctx.questions:
            r = evaluate_questions(model, ctx.tokenizer, ctx.questions[split], prompt_fn, ctx.cfg.generation)
            out[split] = {k: r[k] for k in ("em", "f1", "n", "seconds")}
            out[split]["predictions"] = r["predictions"][:20]  # a sample, for the report's reader
    return out


def _tuned(ctx: Context, make_model, prompt_fn) -> dict:
    from mlpmem.experiments.qa.eval_qa import tune_lambda

    lam, curve = tune_lambda(make_model, ctx.tokenizer, ctx.questions["validation"], ctx.cfg.lambda_grid,
                             prompt_fn, ctx.cfg.generation)
    return {"lambda": lam, "validation_curve": curve, **_evaluate_splits(ctx, make_model(lam), prompt_fn)}


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def method_base(ctx: Context, state: dict):
    return ctx.model, _evaluate_splits(ctx, ctx.model, ctx.prompts), {
        "trainable_parameters": 0, "train_seconds": 0.0, "inference_bytes": 0}


def method_rag(kind: str):
    def run(ctx: Context, state: dict):
        import dataclasses

        from mlpmem.baselines.rag import RAG, load_encoder
        from mlpmem.experiments.qa.eval_qa import prompt_builder

        t0 = time.perf_counter()
        encoder = None
        if kind == "dense":
            encoder = state.setdefault("encoder", load_encoder())
        rag = RAG.from_documents(ctx.docs, ctx.tokenizer, dataclasses.replace(ctx.cfg.rag, retriever=kind), encoder)
        index_seconds = time.perf_counter() - t0
        index_bytes = int(rag.retriever.embeddings.numel() * 4) if kind == "dense" else None
        prompt_fn = prompt_builder(ctx.cfg.shots, rag)
        return None, _evaluate_splits(ctx, ctx.model, prompt_fn), {
            "trainable_parameters": 0, "train_seconds": index_seconds, "inference_bytes": index_bytes,
            "inference_note": "passages + index, retrieval per question"}
    return run


def method_knnlm(ctx: Context, state: dict):
    from mlpmem.experiments.qa.eval_qa import knnlm_decoder

    decoder, chosen = knnlm_decoder(ctx.model, ctx.run.dir, lam=0.0)

    def make(lam):
        decoder.lam = lam
        return decoder

    keys_s = ctx.run.timings().get("keys_train", {}).get("seconds")
    return decoder, _tuned(ctx, make, ctx.prompts), {
        "trainable_parameters": 0, "train_seconds": keys_s, "inference_bytes": _dir_bytes(ctx.run.path("datastore")),
        "k": chosen["k"], "temperature": chosen["temperature"]}


def method_memory(ctx: Context, state: dict):
    from mlpmem.inference.augmented_lm import MemoryAugmentedLM

    results = state["memory_results"]
    mixed = MemoryAugmentedLM.from_pretrained(ctx.run.path("memory"), ctx.model, ctx.tokenizer, lam=0.0)

    def make(lam):
        mixed.set_lambda(lam)
        return mixed

    t = ctx.run.timings()
    offline = sum(t.get(k, {}).get("seconds", 0.0) for k in ("keys_train", "teacher", "train"))
    return mixed, _tuned(ctx, make, ctx.prompts), {
        "trainable_parameters": results["memory_trainable_parameters"], "train_seconds": offline,
        "train_seconds_memory_only": t.get("train", {}).get("seconds"), "inference_bytes": results["memory_bytes"]}


def method_cpt(ctx: Context, state: dict):
    from mlpmem.baselines.cpt import train_cpt

    model = copy.deepcopy(ctx.model)
    stats = train_cpt(model, ctx.tokenizer, ctx.docs, ctx.cfg.cpt, ctx.progress)
    return model, _evaluate_splits(ctx, model, ctx.prompts), stats


def method_lora(ctx: Context, state: dict):
    from mlpmem.baselines.lora import train_lora

    target = state["memory_results"]["memory_trainable_parameters"]
    model, stats = train_lora(copy.deepcopy(ctx.model), ctx.tokenizer, ctx.docs, target, ctx.cfg.lora, ctx.progress)
    return model, _evaluate_splits(ctx, model, ctx.prompts), stats


RUNNERS = {"base": method_base, "rag-dense": method_rag("dense"), "rag-bm25": method_rag("bm25"),
           "knnlm": method_knnlm, "cpt": method_cpt, "lora": method_lora, "memory": method_memory}


# ---------------------------------------------------------------------------------------------
# No regression


def no_regression_items(cfg: NoRegressionConfig, seed: int) -> dict:
    from mlpmem.experiments.qa.bigbench import multiple_choice, qa_wikidata

    return {"qa_wikidata": qa_wikidata(cfg.qa_wikidata, seed),
            **{t: multiple_choice(t, cfg.mc_limit, seed) for t in cfg.mc_tasks}}


def no_regression(model, tokenizer, items: dict, gen: GenerationConfig) -> dict:
    from mlpmem.experiments.qa.choice import score_multiple_choice
    from mlpmem.experiments.qa.eval_qa import evaluate_questions

    out = {}
    for task, rows in items.items():
        if task == "qa_wikidata":
            r = evaluate_questions(model, tokenizer, rows, cfg=gen)
            out[task] = {k: r[k] for k in ("em", "f1", "n")}
        else:
            out[task] = score_multiple_choice(model, tokenizer, rows, gen.batch_size)
    return out


# ---------------------------------------------------------------------------------------------
# The suite


def collect_benchmark(cfg: QASuiteConfig, name: str) -> dict | None:
    """What an earlier (possibly interrupted) suite finished for one benchmark, without computing anything."""
    bench_dir = Path(cfg.out_dir) / name
    memory = bench_dir / "memory-run" / "results.json"
    if not memory.exists():
        return None
    out = {"memory_run": read_json(memory, "memory run results"), "methods": {},
           "questions": {k: len(v) for k, v in question_splits(bench_dir / "data", cfg.benchmarks[name]).items()}}
    for method in cfg.methods:
        path = bench_dir / "methods" / f"{method}.json"
        if path.exists():
            out["methods"][method] = read_json(path, f"{method} results")
    _add_chance(cfg, name, out)
    return out


def _add_chance(cfg: QASuiteConfig, name: str, out: dict) -> None:
    if name == "synthetic":
        from mlpmem.experiments.qa.synthetic import (
            SyntheticConfig,
            chance_accuracy,
            generate,
        )

        out["chance_em_held_out"] = 100 * chance_accuracy(generate(SyntheticConfig(**cfg.benchmarks[name].options)))


def run_benchmark(cfg: QASuiteConfig, name: str, backbone, progress: bool = True) -> dict:
    ctx = Context(cfg, name, backbone, progress)
    state = {"memory_results": ctx.memory_results()}
    nr_items = no_regression_items(cfg.no_regression, cfg.seed) if name == cfg.no_regression.memory_from else None
    out = {"memory_run": state["memory_results"], "questions": {k: len(v) for k, v in ctx.questions.items()},
           "methods": {}}
    for method in cfg.methods:
        path = ctx.dir / "methods" / f"{method}.json"
        if path.exists():
            out["methods"][method] = read_json(path, f"{method} results")
            continue
        print(f"[qa] {name}: {method}", flush=True)
        t0 = time.perf_counter()
        model, scores, info = RUNNERS[method](ctx, state)
        result = {**scores, **info}
        if nr_items is not None and method in cfg.no_regression.methods and model is not None:
            result["no_regression"] = no_regression(model, ctx.tokenizer, nr_items, cfg.generation)
        result["wall_seconds"] = time.perf_counter() - t0
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, result)
        out["methods"][method] = result
        del model
    _add_chance(cfg, name, out)
    return out


def run_ablations(cfg: QASuiteConfig, backbone, progress: bool = True, train: bool = True) -> dict:
    """The ablation studies on their own pipeline run; with ``train=False`` only the finished ones are collected."""
    from mlpmem.experiments.ablation import config_record, run_study
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.pipeline.datastore import stage_datastore
    from mlpmem.pipeline.knnlm import stage_knnlm
    from mlpmem.pipeline.run import Run
    from mlpmem.pipeline.teacher import stage_teacher

    abl = cfg.ablations or AblationSuiteConfig()
    pcfg = PipelineConfig.from_yaml(abl.pipeline)
    out = {}
    for study in abl.studies:
        path = Path(pcfg.run_dir) / "ablations" / study / "results.json"
        if path.exists():
            done = read_json(path, study)
            if done.get("config") == config_record(pcfg):  # a study of another configuration is redone
                out[study] = done["rows"]
    if train and cfg.ablations is not None and set(out) != set(abl.studies):
        run = Run(pcfg, progress)
        run._backbone = backbone
        stage_datastore(run)
        stage_knnlm(run)
        stage_teacher(run)
        for study in abl.studies:
            if study not in out:
                out[study] = run_study(run, study, progress)
    return {"run_dir": pcfg.run_dir, "studies": out} if out else {}


def run_suite(cfg: QASuiteConfig, progress: bool = True, compute: bool = True) -> dict:
    """Every benchmark, method, check and ablation of ``cfg``; returns (and writes) ``out_dir/results.json``.

    ``compute=False`` only collects what earlier runs finished (a report of an interrupted suite).
    """
    from mlpmem.backbone import load_backbone
    from mlpmem.utils.runtime import set_threads

    set_threads()
    backbone = load_backbone(cfg.backbone) if compute else None
    results = {"benchmarks": {}, "config": _config_dict(cfg)}
    for name in cfg.benchmarks:
        bench = run_benchmark(cfg, name, backbone, progress) if compute else collect_benchmark(cfg, name)
        if bench is not None:
            results["benchmarks"][name] = bench
        write_json(Path(cfg.out_dir) / "results.json", results)
    results["ablations"] = run_ablations(cfg, backbone, progress, train=compute and cfg.ablations is not None)
    write_json(Path(cfg.out_dir) / "results.json", results)
    return results


def _config_dict(cfg: QASuiteConfig) -> dict:
    import dataclasses

    d = dataclasses.asdict(cfg)
    return json.loads(json.dumps(d, default=str))
