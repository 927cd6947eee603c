"""The command ``python -m studies bench infer``: build every method of a finished run, time them, write the results."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from mlpmem.backbone import load_backbone
from mlpmem.baselines.methods import MethodOptions, build_method, knnlm_chosen, run_results
from mlpmem.compute import compute_device, model_device
from mlpmem.pipeline.config import PipelineConfig
from studies.bench.common import threads, write_outputs
from studies.bench.infer.config import BATCH1_ONLY, FALLBACK_LAMBDA, InferBenchConfig
from studies.bench.infer.ladder import bf16_quality, ladder_notes, memory_variants
from studies.bench.infer.measure import (
    TimedMethod,
    interleaved,
    machine,
    mixing_microbench,
    summaries,
    weight_limits,
)
from studies.bench.infer.report import gate_ratios, plot, report
from studies.bench.infer.setup import knn_method, prompt_windows, rag_method, split_documents, timed


def run_bench(config_path: str, cfg: InferBenchConfig, progress: bool = True) -> dict:
    """Every method of ``cfg.methods`` (and the ladder) timed on the run of ``config_path``; the results dict."""
    n_threads = threads(cfg.threads)
    run_cfg = PipelineConfig.from_yaml(config_path, cfg.overrides)
    run_dir = Path(run_cfg.run_dir)
    model, tokenizer = load_backbone(run_cfg.backbone.name)
    backbone = model.to(compute_device(run_cfg.backbone.device)), tokenizer
    chosen = {"memory": run_results(run_dir)["lambda"], "knnlm": knnlm_chosen(run_dir)["lambda"]}
    lam = cfg.lam if cfg.lam is not None else (chosen["memory"] or FALLBACK_LAMBDA["memory"])
    mixed = build_method("memory", run_dir, backbone, MethodOptions(lam=lam)).model
    memory = mixed.memory
    methods = {"backbone": timed("backbone", build_method("backbone", run_dir, backbone)),
               "memory": TimedMethod("memory", context=mixed.active)}
    info: dict = {"chosen_lambda": chosen, "memory": {"lambda": lam, "fused_head": mixed.fuse_head,
                                                      "layers": memory.config.num_layers,
                                                      "tie_head": memory.config.tie_head}}
    if "memory-gate" in cfg.methods:
        gated = build_method("memory-gate", run_dir, backbone).model
        methods["memory-gate"] = TimedMethod("memory-gate", context=gated.active)
        info["memory-gate"] = {"gate": gated.gate.config.to_dict(), "fused_head": gated.fuse_head}
    ladder = memory_variants(model, memory, lam) if cfg.ladder else {}
    info["notes"] = ladder_notes(model, memory) if cfg.ladder else []
    for name, variant in ladder.items():
        methods[name] = TimedMethod(name, context=variant.active)
    knn_lam = chosen["knnlm"] or FALLBACK_LAMBDA["knnlm"]
    for name in ("knnlm", "knnlm-exact"):
        if name in cfg.methods:
            methods[name], info[name] = knn_method(cfg, run_dir, backbone, knn_lam, progress,
                                                   run_cfg.backbone.precision, name == "knnlm-exact", config_path)
    if "rag" in cfg.methods:
        methods["rag"], info["rag"] = rag_method(cfg, run_cfg, backbone)
    prompts = prompt_windows(split_documents(run_cfg, "test"), tokenizer, cfg.prompt_tokens, max(cfg.batch_sizes))
    samples = interleaved(model, methods, prompts, cfg, set(ladder) | set(BATCH1_ONLY), progress)
    results = summaries(samples)
    results["gate_decode_ratio"] = gate_ratios(results)
    results.update(info=info, limits=weight_limits(model, memory), mixing=mixing_microbench(
        memory.config.vocab_size, lam if 0 < lam < 1 else 0.5), machine=machine(n_threads, model_device(model)),
                   config=asdict(cfg), run_config=config_path, seconds_total=None)
    info["vocab"] = memory.config.vocab_size
    if "memory:bf16" in ladder:
        info["bf16_quality"] = bf16_quality(memory, model, run_dir, lam)
    return results


def main(config_path: str, cfg: InferBenchConfig, progress: bool = True) -> dict:
    """Run the benchmark and write ``results.json``, ``report.md`` and ``speed.png`` into ``cfg.out_dir``."""
    t0 = time.perf_counter()
    results = run_bench(config_path, cfg, progress)
    results["seconds_total"] = time.perf_counter() - t0
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(out, results, report(results), plot, "speed.png")
    return results
