"""Configuration of the QA suite (``python -m studies qa report``): benchmarks, methods, no-regression checks,
ablations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from mlpmem.baselines.cpt import FinetuneConfig
from mlpmem.baselines.lora import LoRAConfig
from mlpmem.baselines.methods import METHODS
from mlpmem.baselines.rag import RAGConfig
from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.evaluation.stats import BootstrapConfig
from mlpmem.inference.gate import check_floor
from mlpmem.inference.mixing import check_lambda
from mlpmem.inference.prompts import demonstrations
from studies.qa.eval_qa import GenerationConfig
from studies.tasks.installable import BATTERY_GROUP, DETECT_GROUP, PREFER_GROUP

BENCHMARKS = ("halueval_qa", "synthetic", "disfl_qa")
NO_REGRESSION_METHODS = ("backbone", "knnlm", "cpt", "lora", "memory", "memory-gate")
"""The methods that change the model itself (RAG only changes the prompt)."""
BATTERY_METHODS = ("backbone", "rag-dense", "rag-bm25", "knnlm", "cpt", "lora", "memory", "memory-gate")


@dataclass
class BatteryConfig(Config):
    methods: list[str] = field(default_factory=lambda: ["backbone", "rag-dense", "rag-bm25", "knnlm", "cpt", "lora",
                                                        "memory"])
    """Methods scored, each paired with ``backbone`` (which must be among them)."""
    tasks: list[str] = field(default_factory=lambda: [BATTERY_GROUP, DETECT_GROUP, PREFER_GROUP])
    """lm-eval tasks or groups of the prepared folder."""
    tasks_dir: str = ""
    """A folder written by ``python -m studies tasks prepare``; empty: the suite writes one from the fields below
    (closed-book preference from ``no_regression.memory_from``'s questions when it is ``halueval_qa``)."""
    battery_limit: int = 200
    """Items per task of the installable battery (:class:`~studies.tasks.prepare.TasksConfig`)."""
    detect_limit: int = 1000
    """Items per task of HaluEval's hallucination detection."""
    mc_tasks: list[str] = field(default_factory=list)
    """BIG-bench multiple-choice tasks (read only from ``$MLPMEM_BIGBENCH_ARCHIVE``)."""
    mc_limit: int = 200
    truthfulness: list[str] = field(default_factory=list)
    """BIG-bench truthfulness tasks, every item of each (read only from ``$MLPMEM_BIGBENCH_ARCHIVE``)."""
    limit: int | None = None
    """Items scored per task (None: every item of the folder)."""
    batch_size: int = 8
    one_pass: bool = True
    """Score backbone, memory, memory-gate and kNN-LM from one backbone pass per request (see the module)."""
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """Every method's model calls: ``fp32``, ``bf16`` (autocast; every method at the same precision, so the paired
    differences compare like with like) or ``auto``, resolved once by the computing call
    (:func:`studies.qa.suite.machine_precision`)."""

    def validate(self) -> None:
        if "backbone" not in self.methods or set(self.methods) - set(BATTERY_METHODS):
            raise ConfigError(f"battery.methods must include backbone and be among {list(BATTERY_METHODS)}, "
                              f"got {self.methods}")
        if not self.tasks or self.mc_limit < 1 or (self.limit is not None and self.limit < 1) or self.batch_size < 1:
            raise ConfigError("battery: tasks must be non-empty, mc_limit, limit and batch_size >= 1")
        if self.battery_limit < 0 or self.detect_limit < 0:
            raise ConfigError("battery: battery_limit and detect_limit must be >= 0")


@dataclass
class BenchmarkConfig(Config):
    pipeline: str
    """PipelineConfig YAML of this benchmark's memory (its run_dir and corpus.path are set by the suite)."""
    pipeline_set: list[str] = field(default_factory=list)
    """``KEY=VALUE`` overrides of that YAML (as ``--set`` gives them), e.g. ``["train.alpha=0.2"]``."""
    options: dict = field(default_factory=dict)
    """Generator options: SyntheticConfig fields, or ``max_paragraphs`` / ``heldout_paragraphs`` for disfl_qa."""
    tune_questions: int = 80
    test_questions: int = 240


@dataclass
class NoRegressionConfig(Config):
    memory_from: str = "halueval_qa"
    """The benchmark whose models (memory, kNN-LM datastore, CPT, LoRA) are checked, here and by the battery."""
    qa_wikidata: int = 0
    """BIG-bench cloze facts scored in the suite (read only from ``$MLPMEM_BIGBENCH_ARCHIVE``; 0: none)."""
    mc_tasks: list[str] = field(default_factory=list)
    """BIG-bench multiple-choice tasks scored in the suite (read only from ``$MLPMEM_BIGBENCH_ARCHIVE``)."""
    mc_limit: int = 100
    methods: list[str] = field(default_factory=lambda: list(NO_REGRESSION_METHODS))

    def validate(self) -> None:
        if self.memory_from not in BENCHMARKS:
            raise ConfigError(f"no_regression.memory_from must be one of {BENCHMARKS}")
        if set(self.methods) - set(NO_REGRESSION_METHODS):
            raise ConfigError(f"no_regression.methods must be among {sorted(NO_REGRESSION_METHODS)}, "
                              f"got {self.methods}")


@dataclass
class AblationSuiteConfig(Config):
    pipeline: str = "studies/qa/configs/qa-ablate.yaml"
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
    gate_offset_grid: list[float] = field(default_factory=lambda: [0.0])
    """memory-gate: offsets added to the gate's logit, one chosen on the validation questions as λ is (the gate is
    trained on corpus text, whose positions are not questions); ``[0.0]``: the gate as trained."""
    gate_offset_rule: Literal["best", "one_se"] = "best"
    """How the offset is chosen on the validation questions: ``best`` F1, or ``one_se``, the smallest offset within
    one standard error of the best F1 (the most closed gate the questions cannot tell from the best)."""
    gate_floor_grid: list[float] = field(default_factory=lambda: [0.0])
    """memory-gate: floors below which the gate's λ_t as trained (before the offset) makes it exactly 0 (the
    backbone alone there, :meth:`~mlpmem.inference.gate.Gate.set_floor`), one chosen on the validation questions
    after the offset; ``[0.0]``: no floor."""
    gate_floor_rule: Literal["best", "one_se"] = "one_se"
    """How the floor is chosen: ``best`` F1 (ties to the larger floor), or ``one_se``, the largest floor within
    one standard error of the best F1 (the gate closed on the most positions the questions cannot tell from the
    best)."""
    gate_training: Literal["text", "questions"] = "text"
    """What memory-gate's gate learns from: ``text``, the memory run's gate (``mlpmem gate``, the run's validation
    text); ``questions``, a gate of the same kind trained on the benchmark's validation questions and answers
    (:mod:`studies.qa.question_gate`)."""
    gate_negatives: int = 0
    """With ``gate_training: questions``: this many items of general knowledge in no benchmark's corpus, where the
    backbone should speak, join the gate's training questions: HaluEval QA items the suite does not read, half
    closed-book and half with their knowledge in the prompt (:mod:`studies.qa.gate_negatives`)."""
    gate_negative_tasks: list[str] = field(default_factory=list)
    """With ``gate_negatives``: draw them from these BIG-bench multiple-choice tasks instead (each item's gold choice
    in the task's own prompt; families the suite does not score, :mod:`studies.qa.gate_negatives`)."""
    gate_negatives_unconditional: bool = False
    """With ``gate_negatives``: each item that brings its own prompt also as the unconditional term of lm-eval's
    ``acc_mutual_info`` scores it, its answer after the start token and the answer prefix alone (no prompt)."""
    shots: int = 0
    """Format demonstrations before every QA prompt, the same for every method (:mod:`mlpmem.inference.prompts`)."""
    rag: RAGConfig = field(default_factory=RAGConfig)
    cpt: FinetuneConfig = field(default_factory=FinetuneConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    no_regression: NoRegressionConfig = field(default_factory=NoRegressionConfig)
    ablations: AblationSuiteConfig | None = field(default_factory=AblationSuiteConfig)
    battery: BatteryConfig | None = None
    """The no-regression battery through lm-eval (:mod:`studies.qa.battery`); None: not run."""
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    """The report's seeded bootstrap over the per-item scores (standard errors, paired 95 % intervals)."""

    def validate(self) -> None:
        bad = set(self.benchmarks) - set(BENCHMARKS)
        if bad or not self.benchmarks:
            raise ConfigError(f"qa benchmarks must be a non-empty subset of {BENCHMARKS}, got {sorted(bad)}")
        self.benchmarks = {k: v if isinstance(v, BenchmarkConfig) else BenchmarkConfig(**v)
                           for k, v in self.benchmarks.items()}
        if set(self.methods) - set(METHODS) or "backbone" not in self.methods:
            raise ConfigError(f"qa methods must include backbone and be among {list(METHODS)}")
        for lam in self.lambda_grid:
            check_lambda(lam, "qa lambda_grid")
        if not self.gate_offset_grid or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                                and math.isfinite(b) for b in self.gate_offset_grid):
            raise ConfigError(f"qa gate_offset_grid must be a non-empty list of numbers, got {self.gate_offset_grid}")
        if not self.gate_floor_grid:
            raise ConfigError("qa gate_floor_grid must be a non-empty list of numbers in [0, 1), got []")
        for floor in self.gate_floor_grid:
            check_floor(floor, "each qa gate_floor_grid value")
        if not isinstance(self.gate_negatives, int) or self.gate_negatives < 0:
            raise ConfigError(f"qa gate_negatives must be an integer >= 0, got {self.gate_negatives!r}")
        if not isinstance(self.gate_negative_tasks, list) or not all(isinstance(t, str) and t
                                                                     for t in self.gate_negative_tasks):
            raise ConfigError(f"qa gate_negative_tasks must be a list of BIG-bench task names, "
                              f"got {self.gate_negative_tasks!r}")
        if self.gate_negatives_unconditional and not self.gate_negatives:
            raise ConfigError("qa gate_negatives_unconditional needs gate_negatives > 0")
        if self.gate_negative_tasks and not self.gate_negatives:
            raise ConfigError("qa gate_negative_tasks needs gate_negatives > 0 (how many items to draw from them)")
        demonstrations(self.shots)  # validates the range
        if isinstance(self.ablations, dict):
            self.ablations = AblationSuiteConfig(**self.ablations)
        if isinstance(self.battery, dict):
            self.battery = BatteryConfig(**self.battery)

