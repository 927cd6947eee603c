"""One timed generation, the interleaved repetitions of every method, their summaries and the machine's limits."""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mlpmem.compute import model_device, resolve_precision, synchronize
from mlpmem.inference.mixing import mix
from studies.bench.common import summarize, unique_param_bytes
from studies.bench.infer.config import InferBenchConfig


@dataclass
class TimedMethod:
    """A method as the benchmark times it: hooks around the shared backbone's own forward, no wrapper call."""

    name: str
    context: Callable = contextlib.nullcontext
    """A context manager that installs the method's hooks on the backbone (nullcontext: the backbone)."""
    prepare: Callable | None = None
    """Optional ``(prompt_ids (B, P)) -> input_ids (B, P')``, timed as part of TTFT (RAG's retrieval)."""
    extra: Callable | None = None
    """Optional ``() -> dict`` of extra measurements of the last call (e.g. seconds spent retrieving)."""


@torch.no_grad()
def measure(model, method: TimedMethod, prompt_ids: torch.Tensor, new_tokens: int) -> dict:
    """TTFT (s) and decode tokens/s of one greedy generation of ``new_tokens`` tokens from ``prompt_ids``."""
    batch, prompt_ids = prompt_ids.shape[0], prompt_ids.to(model_device(model))
    synchronize(model)
    with method.context():
        t0 = time.perf_counter()
        input_ids = method.prepare(prompt_ids) if method.prepare else prompt_ids
        out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        next_ids = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        synchronize(model)
        ttft = time.perf_counter() - t0
        cache = out.cache  # the KV cache (``cache`` in transformers 5, formerly past_key_values)
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            out = model(input_ids=next_ids, cache=cache, use_cache=True, logits_to_keep=1)
            next_ids, cache = out.logits[:, -1].argmax(-1, keepdim=True), out.cache
        synchronize(model)
        decode = time.perf_counter() - t1
    extra = method.extra() if method.extra else {}
    return {"ttft_s": ttft, "decode_tok_s": (new_tokens - 1) * batch / decode, "input_tokens": input_ids.shape[1],
            **extra}


def interleaved(model, methods: dict[str, TimedMethod], prompts: torch.Tensor, cfg: InferBenchConfig,
                batch1_names: set[str], progress: bool) -> dict:
    """``{(method, batch): [measurement, ...]}`` of every repetition after the warm-up, methods rotated each time;
    the methods in ``batch1_names`` are timed at batch 1 only."""
    samples: dict = {}
    jobs = [(b, name) for b in cfg.batch_sizes for name in methods if b == 1 or name not in batch1_names]
    bar = tqdm(total=(cfg.warmup + cfg.repeats) * len(jobs), desc="bench infer", disable=not progress,
               dynamic_ncols=True)
    for rep in range(cfg.warmup + cfg.repeats):
        shift = rep % len(jobs)
        for b, name in jobs[shift:] + jobs[:shift]:  # rotate the order: no method is always first or last
            m = measure(model, methods[name], prompts[:b], cfg.new_tokens)
            if rep >= cfg.warmup:
                samples.setdefault((name, b), []).append(m)
            bar.update(1)
    bar.close()
    return samples


def summaries(samples: dict) -> dict:
    """Median / min / max of each method and batch size, and the ratios of medians to the backbone's."""
    table: dict = {}
    for (name, b), runs in samples.items():
        entry = {k: summarize([r[k] for r in runs]) for k in ("ttft_s", "decode_tok_s")}
        entry["input_tokens"] = runs[0]["input_tokens"]
        for key in ("search_s", "retrieval_s"):
            if key in runs[0]:
                entry[key] = summarize([r[key] for r in runs])
        table.setdefault(name, {})[str(b)] = entry
    ratios = {}
    for name, by_batch in table.items():
        for b, entry in by_batch.items():
            base = table["backbone"][b]
            ratios.setdefault(name, {})[b] = {
                "ttft_vs_backbone": entry["ttft_s"]["median"] / base["ttft_s"]["median"],
                "decode_vs_backbone": entry["decode_tok_s"]["median"] / base["decode_tok_s"]["median"]}
    return {"methods": table, "ratios": ratios}


def weight_limits(model, memory) -> dict:
    """Bytes read per batch-1 decode step and the memory's best possible decode ratio (weight-bound). A corpus
    head's rows are the memory's own (in its extra bytes): no fused head, no second read of the tied one."""
    backbone_bytes = unique_param_bytes(model)
    extra = unique_param_bytes(memory, exclude=[model])
    head = model.get_output_embeddings().weight
    head_bytes = head.numel() * head.element_size()
    rows = None if memory.vocab_ids is None else memory.vocab_ids.numel()
    separate = extra + (head_bytes if memory.config.tie_head and rows is None else 0)  # a tied head read again
    return {"backbone_bytes": backbone_bytes, "memory_extra_bytes": extra, "head_bytes": head_bytes,
            "corpus_head_rows": rows, "decode_ratio_limit_fused": backbone_bytes / (backbone_bytes + extra),
            "decode_ratio_limit_separate_heads": backbone_bytes / (backbone_bytes + separate)}


def mixing_microbench(vocab: int, lam: float, batch: int = 1, iters: int = 200) -> dict:
    """Seconds per call of the one-pass mixing vs two log_softmax tensors + logaddexp, on (B, 1, V) logits."""
    a, b = torch.randn(batch, 1, vocab) * 5, torch.randn(batch, 1, vocab) * 5
    out = {}
    for name, fn in (("one_pass", lambda: mix(a, b, lam)),
                     ("two_log_softmax", lambda: mix(F.log_softmax(a, -1), F.log_softmax(b, -1), lam, logits=False))):
        for _ in range(10):
            fn()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            samples.append((time.perf_counter() - t0) / iters)
        out[name] = summarize(samples)
    return out


def machine(n_threads: int, device: torch.device | None = None) -> dict:
    """CPU model, threads, torch version, the device the models ran on (a GPU's name) and whether it computes bf16
    natively (what ``precision: auto`` resolves to there) of the measurement."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu or platform.processor(), "threads": n_threads, "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else "cpu",
            "native_bf16": resolve_precision("auto", device if device is not None else "cpu") == "bf16"}


def machine_label(machine: dict) -> str:
    """CPU, threads, device and, where the record has it, whether bf16 is native there (it sets the speed)."""
    bf16 = {True: ", native bf16", False: ", no native bf16"}.get(machine.get("native_bf16"), "")
    return f"{machine['cpu']}, {machine['threads']} threads, device {machine['device']}{bf16}"
