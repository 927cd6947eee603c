"""Item 5: an MLP Memory (the project's own pipeline) on top of each trained model.

Each trained model folder (weights + tokenizer) is a local backbone for ``mlpmem.pipeline``: keys are
captured at its last block's feed-forward input by ``KeyHook`` (the Memory Mosaics model is laid out like
Llama for this), the kNN-LM sweep and the sparse teacher are built on a capped slice of the same training
split, a memory is trained, and test perplexity with and without the memory (λ chosen on validation) is
read from the run's ``results.json`` (summary: ``out_dir/memory_on_top.{json,md}``). Windows are as long
as the training context (256 tokens, stride 128) so that neither model runs past the length it was trained on.
"""

from __future__ import annotations

from pathlib import Path

from memory_mosaics.experiments.config import MosaicsExperiment
from memory_mosaics.experiments.experiment import save_tokenizer_with_models
from memory_mosaics.experiments.report import KIND_NAMES
from mlpmem.config import from_dict
from mlpmem.pipeline import run_pipeline
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.utils.shards import write_json


def pipeline_config(exp: MosaicsExperiment, kind: str, max_train_tokens: int = 60000, max_eval_tokens: int = 15000):
    """The MLP Memory pipeline configuration of one trained model."""
    out = Path(exp.out_dir)
    raw = {
        "run_dir": str(out / f"memory-{kind}"),
        "seed": exp.seed,
        "backbone": {"name": str(out / kind / "model"), "layer": -1, "site": "ffn_input", "precision": "fp32"},
        "corpus": {"name": exp.corpus, "block_size": exp.train.seq_len, "stride": exp.train.seq_len // 2,
                   "max_tokens": {"train": max_train_tokens, "validation": max_eval_tokens, "test": max_eval_tokens}},
        "teacher": {"k": 256, "top_k": 32, "query_batch": 1024, "index": {"kind": "exact"}},
        "knnlm": {"k_grid": [16, 64, 256], "temperature_grid": [0.1, 0.3, 1.0, 3.0],
                  "lambda_grid": [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5], "exact": True},
        "memory": {"preset": "tiny", "tie_head": True, "init": "backbone"},
        "train": {"alpha": 0.4, "epochs": 2, "batch_size": 256, "lr": 0.001, "precision": "fp32"},
    }
    return from_dict(PipelineConfig, raw)


def memory_stage(exp: MosaicsExperiment, kinds, progress: bool = True, rebuild: bool = False) -> dict:
    """Run the MLP Memory pipeline on each trained model; summary in ``out_dir/memory_on_top.json``."""
    save_tokenizer_with_models(exp, kinds)
    summary = {}
    for kind in kinds:
        results = run_pipeline(Run(pipeline_config(exp, kind), progress=progress), rebuild=rebuild)
        summary[kind] = {"lambda": results["lambda"], **results["test"],
                         **{k: results[k] for k in ("memory_parameters", "memory_trainable_parameters",
                                                    "memory_bytes", "datastore_bytes", "train_seconds")}}
    write_json(Path(exp.out_dir) / "memory_on_top.json", summary)
    (Path(exp.out_dir) / "memory_on_top.md").write_text(memory_table(summary) + "\n")
    return summary


def memory_table(summary: dict) -> str:
    rows = ["| base model | test PPL alone | kNN-LM | memory alone | memory + model (λ) | memory trainable params "
            "(with tied head) | memory MB | datastore MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, s in summary.items():
        rows.append(f"| {KIND_NAMES[kind]} | {s['backbone']:.2f} | {s['knnlm']:.2f} | {s['memory']:.2f} | "
                    f"{s['memory+backbone']:.2f} ({s['lambda']}) | {s['memory_trainable_parameters']:,} "
                    f"({s['memory_parameters']:,}) | {s['memory_bytes'] / 1e6:.2f} | "
                    f"{s['datastore_bytes'] / 1e6:.1f} |")
    return "\n".join(rows)
