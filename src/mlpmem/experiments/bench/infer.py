"""``mlpmem bench-infer``: time to first token and decoding speed of backbone, memory, kNN-LM and RAG.

All methods run the same frozen backbone on the same prompts (token windows of the default corpus's test
split), in one process, interleaved repetition by repetition after warm-up (see ``bench.common``):

  - **TTFT**: from the prompt ids to the first generated token id: one prefill forward with KV cache
    and ``logits_to_keep=1``, plus, for RAG, retrieval and building the longer prompt (timed inside);
  - **decode**: ``new_tokens - 1`` further greedy steps from that cache, in generated tokens/s (all
    sequences of the batch counted).

Methods: ``backbone``; ``memory`` (:class:`~mlpmem.inference.augmented_lm.MemoryAugmentedLM`, the run's trained memory and
λ); ``knnlm`` (:class:`~mlpmem.baselines.knnlm.KnnLMDecoder`: one IVF-PQ search of ≥ 1M keys per
kept position and step; the run's k, T, λ); ``rag`` (:class:`~mlpmem.baselines.rag.RAG`: dense retrieval
of ``rag_top_k`` passages of the run's training corpus, the prompt placed after them, cut to one common
length per batch). With ``ladder`` the memory is also timed without each decode optimization
(memory on every prompt position, separate heads, mixing through two log_softmax tensors) to measure
each step's effect. The physical limit of the memory's decode ratio at batch 1 — weight bytes read per
step, backbone / (backbone + memory extra) — is printed next to the measurement.
"""

from __future__ import annotations

import contextlib
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mlpmem.config import Config
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.experiments.bench.common import (
    markdown_table,
    summarize,
    threads,
    unique_param_bytes,
    write_text,
)
from mlpmem.experiments.bench.knn_setup import KnnSetupConfig
from mlpmem.inference.augmented_lm import MemoryAugmentedLM, _keep_positions
from mlpmem.inference.mixing import mix_log_probs

METHODS = ("backbone", "memory", "knnlm", "rag", "knnlm-exact")
DEFAULT_METHODS = METHODS[:4]
BATCH1_ONLY = ("knnlm-exact",)  # brute force over every key per step: timed at batch 1 only
FALLBACK_LAMBDA = {"memory": 0.3, "knnlm": 0.2}  # timed instead of a chosen λ = 0, which skips the method
LADDER = ("memory:naive", "memory:+kept", "memory:+fused", "memory:bf16")  # "memory" = all optimizations, fp32


@dataclass
class InferBenchConfig(Config):
    prompt_tokens: int = 256
    new_tokens: int = 32
    batch_sizes: list[int] = field(default_factory=lambda: [1, 4])
    repeats: int = 5
    warmup: int = 1
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    """Any of backbone, memory, knnlm, rag and knnlm-exact (kNN-LM with brute-force search, as the pipeline's
    perplexity evaluation uses; reads every key per step)."""
    ladder: bool = True
    """Also time the memory without each optimization (batch 1 only)."""
    threads: int | None = None
    rag_retriever: str = "dense"
    """``dense`` (all-MiniLM-L6-v2) or ``bm25`` (see baselines.rag)."""
    rag_top_k: int = 3
    rag_context_tokens: int = 512
    """RAG prompt limit = prompt_tokens + this (the passages fill it)."""
    out_dir: str = "runs/bench/infer"
    lam: float | None = None
    """λ of the memory; None: the run's, or ``FALLBACK_LAMBDA`` if the run chose 0 (the memory would not run)."""
    knn: KnnSetupConfig = field(default_factory=KnnSetupConfig)

    def validate(self) -> None:
        if isinstance(self.knn, dict):
            self.knn = KnnSetupConfig(**self.knn)
        bad = set(self.methods) - set(METHODS)
        if bad or "backbone" not in self.methods:
            raise ConfigError(f"bench methods must include backbone and be among {METHODS}, got {self.methods}")
        if self.prompt_tokens < 1 or self.new_tokens < 2 or self.repeats < 1 or self.warmup < 0:
            raise ConfigError("bench prompt_tokens >= 1, new_tokens >= 2, repeats >= 1 and warmup >= 0 needed")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError("bench batch_sizes must hold integers >= 1")


# ---------------------------------------------------------------------------------------------
# Memory variants without one optimization each (for the ladder)


class _SlowMix(MemoryAugmentedLM):
    """Mixing through two full log_softmax tensors, then logaddexp (mixing.mix_log_probs)."""

    def _mix_logits(self, lm_logits, mem_logits):
        return mix_log_probs(F.log_softmax(lm_logits.float(), -1), F.log_softmax(mem_logits.float(), -1), self.lam)


class _AllPositions(_SlowMix):
    """The memory (own head) on every position of the input, sliced afterwards: the unoptimized prefill."""

    def _memory_logits(self, keys, lm_logits, logits_to_keep):
        param = next(self.memory.parameters())
        every = self.memory(keys.to(device=param.device, dtype=param.dtype))  # (B, T, V)
        return _keep_positions(every, lm_logits, logits_to_keep)


def memory_variants(backbone, memory, lam: float) -> dict[str, MemoryAugmentedLM]:
    """The memory without each decode optimization, and with its blocks stored in bf16 (``memory:bf16``)."""
    tied = memory.config.tie_head
    variants = {"memory:naive": _AllPositions(backbone, memory, lam, fuse_head=False),
                "memory:+kept": _SlowMix(backbone, memory, lam, fuse_head=False)}
    if tied:
        variants["memory:+fused"] = _SlowMix(backbone, memory, lam, fuse_head=True)
    variants["memory:bf16"] = MemoryAugmentedLM(backbone, bf16_copy(memory, backbone), lam)
    return variants


def bf16_copy(memory, backbone):
    """A copy of ``memory`` whose own weights are bf16 (a tied head stays the backbone's fp32 tensor)."""
    from mlpmem.memory.model import MemoryConfig, MLPMemory, tie_to_backbone

    clone = MLPMemory(MemoryConfig.from_dict(memory.config.to_dict()))
    clone.load_state_dict(memory.state_dict())
    if memory.config.tie_head:
        tie_to_backbone(clone, backbone)
    return clone.cast_weights(torch.bfloat16).eval()


@torch.no_grad()
def bf16_quality(memory, backbone, run_dir: Path, lam: float, positions: int = 4096) -> dict | None:
    """Memory-only and mixed perplexity of the fp32 and the bf16-weight memory on validation positions."""
    from mlpmem.datastore import KeyStore
    from mlpmem.inference.perplexity import perplexity
    from mlpmem.training.loop import memory_logprobs

    path = run_dir / "eval" / "validation"
    if not (path / "manifest.json").is_file():
        return None
    try:
        store = KeyStore(path, verify=False)
    except MlpmemError:  # incomplete (a run in progress): no quality check
        return None
    keys, targets = store.array("keys")[:positions], store.array("values")[:positions]
    lm = torch.from_numpy(store.array("lm")[:positions].astype(np.float64))
    out = {"positions": len(keys), "lambda": lam, "backbone_ppl": perplexity(lm)}
    for name, mem in (("fp32", memory), ("bf16", bf16_copy(memory, backbone))):
        lp = torch.from_numpy(memory_logprobs(mem, keys, targets))
        out[f"{name}_memory_ppl"] = perplexity(lp)
        out[f"{name}_joint_ppl"] = perplexity(mix_log_probs(lm, lp, lam))
    return out


# ---------------------------------------------------------------------------------------------
# One measurement


@dataclass
class Method:
    name: str
    context: callable = contextlib.nullcontext
    """A context manager that installs the method's hooks on the backbone (nullcontext: the backbone)."""
    prepare: callable = None
    """Optional ``(prompt_ids (B, P)) -> input_ids (B, P')``, timed as part of TTFT (RAG's retrieval)."""
    extra: callable = None
    """Optional ``() -> dict`` of extra measurements of the last call (e.g. seconds spent retrieving)."""


@torch.no_grad()
def measure(model, method: Method, prompt_ids: torch.Tensor, new_tokens: int) -> dict:
    """TTFT (s) and decode tokens/s of one greedy generation of ``new_tokens`` tokens from ``prompt_ids``."""
    batch = prompt_ids.shape[0]
    with method.context():
        t0 = time.perf_counter()
        input_ids = method.prepare(prompt_ids) if method.prepare else prompt_ids
        out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        next_ids = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        ttft = time.perf_counter() - t0
        cache = out.cache  # the KV cache (``cache`` in transformers 5, formerly past_key_values)
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            out = model(input_ids=next_ids, cache=cache, use_cache=True, logits_to_keep=1)
            next_ids, cache = out.logits[:, -1].argmax(-1, keepdim=True), out.cache
        decode = time.perf_counter() - t1
    extra = method.extra() if method.extra else {}
    return {"ttft_s": ttft, "decode_tok_s": (new_tokens - 1) * batch / decode, "input_tokens": input_ids.shape[1],
            **extra}


# ---------------------------------------------------------------------------------------------
# Setup


def load_run(config_path: str):
    """(cfg, model, tokenizer, memory, lam, knnlm results) of a finished run, read-only."""
    from mlpmem.backbone import load_backbone
    from mlpmem.memory.model import MLPMemory
    from mlpmem.pipeline.config import PipelineConfig
    from mlpmem.utils.shards import read_json

    cfg = PipelineConfig.from_yaml(config_path)
    run_dir = Path(cfg.run_dir)
    model, tokenizer = load_backbone(cfg.backbone.name)
    memory = MLPMemory.from_pretrained(run_dir / "memory", model, tokenizer).eval()
    lam = read_json(run_dir / "results.json", "run results (run the pipeline first)")["lambda"]
    knn = read_json(run_dir / "knnlm" / "results.json", "kNN-LM results")["chosen"]
    return cfg, model, tokenizer, memory, lam, knn


def split_documents(cfg, split: str) -> list[dict]:
    """Documents of one split of a run's corpus: shipped, a prepared folder, or the run's own split."""
    from mlpmem.corpora.documents import SPLITS, read_documents, split_files
    from mlpmem.corpora.shipped import prepare

    if cfg.corpus.name is not None:
        folder = prepare(cfg.corpus.name, seed=cfg.seed, **cfg.corpus.options)
    elif all((Path(cfg.corpus.path) / f"{s}.jsonl").is_file() for s in SPLITS):
        folder = Path(cfg.corpus.path)
    else:
        folder = Path(cfg.run_dir) / "corpus"  # split by the pipeline from a raw corpus
    return [{"id": d.id, "text": d.text} for d in read_documents(split_files(folder)[split])]


def prompt_windows(docs: list[dict], tokenizer, length: int, count: int) -> torch.Tensor:
    """``count`` disjoint windows of ``length`` tokens from the documents, in order: (count, length)."""
    from mlpmem.corpora.documents import Document, tokenize_documents

    tokens = tokenize_documents([Document(d["id"], d["text"]) for d in docs], tokenizer)
    flat = np.concatenate([t[1:] for t in tokens])  # without document-start tokens
    if len(flat) < length * count:
        raise ConfigError(f"the test split has {len(flat)} tokens, fewer than {count} prompts of {length}")
    return torch.from_numpy(flat[: length * count].astype(np.int64)).view(count, length)


def rag_method(cfg: InferBenchConfig, run_cfg, tokenizer) -> tuple[Method, dict]:
    from mlpmem.baselines.rag import RAG, RAGConfig

    rag_cfg = RAGConfig(retriever=cfg.rag_retriever, top_k=cfg.rag_top_k,
                        max_prompt_tokens=cfg.prompt_tokens + cfg.rag_context_tokens)
    t0 = time.perf_counter()
    rag = RAG.from_documents(split_documents(run_cfg, "train"), tokenizer, rag_cfg)
    info = {"passages": len(rag.retriever.passages), "index_seconds": time.perf_counter() - t0,
            "retriever": rag_cfg.retriever, "top_k": rag_cfg.top_k, "max_prompt_tokens": rag_cfg.max_prompt_tokens}
    def prepare(prompt_ids: torch.Tensor) -> torch.Tensor:
        questions = tokenizer.batch_decode(prompt_ids)
        prompts = rag.prompts(questions)  # retrieval (dense encoder + top-k) and the prompt with the passages
        ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = min(len(i) for i in ids)  # one common length: keep each prompt's end (the question)
        return torch.tensor([i[len(i) - width :] for i in ids])

    return Method("rag", prepare=prepare, extra=lambda: {"retrieval_s": rag.last_retrieval_seconds}), info


def knn_method(cfg: InferBenchConfig, model, tokenizer, knn_chosen: dict, progress: bool, precision: str = "fp32",
               exact: bool = False):
    from mlpmem.baselines.knnlm import KnnLMDecoder
    from mlpmem.experiments.bench.knn_setup import knn_datastore, knn_index

    t0 = time.perf_counter()
    store = knn_datastore(model, tokenizer, cfg.knn, progress, precision)  # extra keys at the run's precision
    if exact:
        from mlpmem.index import ExactIndex

        index = ExactIndex(store.array("keys"))  # (N, d) fp32 in RAM
    else:
        index = knn_index(store, cfg.knn, progress)
    decoder = KnnLMDecoder(model, index, store.array("values"), store.layer, store.site, k=knn_chosen["k"],
                           temperature=knn_chosen["temperature"], lam=knn_chosen["lambda"])
    info = {"keys": store.num_rows, "sources": [s["path"] for s in store.sources()], "setup_seconds":
            time.perf_counter() - t0, "index": {"kind": "exact"} if exact else vars(cfg.knn.index), **knn_chosen}
    last = {"seen": 0.0}

    def extra() -> dict:  # index.search seconds during the last measurement
        spent, last["seen"] = decoder.search_seconds - last["seen"], decoder.search_seconds
        return {"search_s": spent}

    return Method("knnlm-exact" if exact else "knnlm", context=decoder.active, extra=extra), info


def mixing_microbench(vocab: int, lam: float, batch: int = 1, iters: int = 200) -> dict:
    """Seconds per call of the one-pass mixing vs two log_softmax tensors + logaddexp, on (B, 1, V) logits."""
    from mlpmem.inference.augmented_lm import mix_logits

    a, b = torch.randn(batch, 1, vocab) * 5, torch.randn(batch, 1, vocab) * 5
    out = {}
    for name, fn in (("one_pass", lambda: mix_logits(a, b, lam)),
                     ("two_log_softmax", lambda: mix_log_probs(F.log_softmax(a, -1), F.log_softmax(b, -1), lam))):
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


# ---------------------------------------------------------------------------------------------
# The benchmark


def run_bench(config_path: str, cfg: InferBenchConfig, progress: bool = True) -> dict:
    n_threads = threads(cfg.threads)
    run_cfg, model, tokenizer, memory, lam, knn_chosen = load_run(config_path)
    chosen = {"memory": lam, "knnlm": knn_chosen["lambda"]}
    lam = cfg.lam if cfg.lam is not None else (lam or FALLBACK_LAMBDA["memory"])
    knn_chosen = {**knn_chosen, "lambda": knn_chosen["lambda"] or FALLBACK_LAMBDA["knnlm"]}
    mixed = MemoryAugmentedLM(model, memory, lam=lam, tokenizer=tokenizer)
    methods = {"backbone": Method("backbone"), "memory": Method("memory", context=mixed.active)}
    info: dict = {"chosen_lambda": chosen, "memory": {"lambda": lam, "fused_head": mixed.fuse_head, "layers": memory.config.num_layers,
                             "tie_head": memory.config.tie_head}}
    ladder = memory_variants(model, memory, lam) if cfg.ladder else {}
    for name, variant in ladder.items():
        methods[name] = Method(name, context=variant.active)
    if "knnlm" in cfg.methods:
        methods["knnlm"], info["knnlm"] = knn_method(cfg, model, tokenizer, knn_chosen, progress,
                                                     run_cfg.backbone.precision)
    if "knnlm-exact" in cfg.methods:
        methods["knnlm-exact"], info["knnlm-exact"] = knn_method(cfg, model, tokenizer, knn_chosen, progress,
                                                                 run_cfg.backbone.precision, exact=True)
    if "rag" in cfg.methods:
        methods["rag"], info["rag"] = rag_method(cfg, run_cfg, tokenizer)
    prompts = prompt_windows(split_documents(run_cfg, "test"), tokenizer, cfg.prompt_tokens, max(cfg.batch_sizes))
    samples = _interleaved(model, methods, prompts, cfg, set(ladder) | set(BATCH1_ONLY), progress)
    results = _summaries(samples, cfg)
    results.update(info=info, limits=weight_limits(model, memory), mixing=mixing_microbench(
        memory.config.vocab_size, lam if 0 < lam < 1 else 0.5), machine=_machine(n_threads),
                   config=asdict(cfg), run_config=config_path, seconds_total=None)
    info["vocab"] = memory.config.vocab_size
    if "memory:bf16" in ladder:
        info["bf16_quality"] = bf16_quality(memory, model, Path(run_cfg.run_dir), lam)
    return results


def _interleaved(model, methods, prompts, cfg, ladder_names, progress) -> dict:
    from tqdm.auto import tqdm

    samples: dict = {}
    jobs = [(b, name) for b in cfg.batch_sizes for name in methods if b == 1 or name not in ladder_names]
    bar = tqdm(total=(cfg.warmup + cfg.repeats) * len(jobs), desc="bench-infer", disable=not progress,
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


def _summaries(samples: dict, cfg: InferBenchConfig) -> dict:
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
    """Bytes read per batch-1 decode step and the memory's best possible decode ratio (weight-bound)."""
    backbone_bytes = unique_param_bytes(model)
    extra = unique_param_bytes(memory, exclude=[model])
    head = model.get_output_embeddings().weight
    head_bytes = head.numel() * head.element_size()
    separate = extra + (head_bytes if memory.config.tie_head else 0)  # a tied head read a second time
    return {"backbone_bytes": backbone_bytes, "memory_extra_bytes": extra, "head_bytes": head_bytes,
            "decode_ratio_limit_fused": backbone_bytes / (backbone_bytes + extra),
            "decode_ratio_limit_separate_heads": backbone_bytes / (backbone_bytes + separate)}


def _machine(n_threads: int) -> dict:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu or platform.processor(), "threads": n_threads, "torch": torch.__version__,
            "cuda": torch.cuda.is_available()}


# ---------------------------------------------------------------------------------------------
# Report


PAPER = {"ttft_ms": {"backbone": 22, "memory": 27, "rag": 67, "knnlm": 151},
         "decode_tok_s": {"backbone": 42, "memory": 36, "rag": 24, "knnlm": 6}}


def targets(results: dict) -> list[list]:
    """The issue's targets against the paper's ratios (batch 1), measured here."""
    t = results["methods"]
    med = lambda name, key: t[name]["1"][key]["median"] if name in t and "1" in t[name] else float("nan")
    rows = [["decode tok/s memory / backbone", med("memory", "decode_tok_s") / med("backbone", "decode_tok_s"),
             36 / 42, ">= 0.93"],
            ["TTFT memory / backbone", med("memory", "ttft_s") / med("backbone", "ttft_s"), 27 / 22, "<= 1.10"]]
    if "knnlm" in t:
        rows.append(["decode tok/s memory / kNN-LM", med("memory", "decode_tok_s") / med("knnlm", "decode_tok_s"),
                     36 / 6, ">= 6"])
    if "knnlm-exact" in t:
        rows.append(["decode tok/s memory / kNN-LM (exact search)",
                     med("memory", "decode_tok_s") / med("knnlm-exact", "decode_tok_s"), 36 / 6, ">= 6"])
    if "rag" in t:
        rows.append(["TTFT RAG / memory", med("rag", "ttft_s") / med("memory", "ttft_s"), 67 / 27, ">= 2.5"])
    return [[name, f"{ours:.3f}", f"{paper:.2f}", goal] for name, ours, paper, goal in rows]


def report(results: dict) -> str:
    cfg = results["config"]
    lines = ["# Inference speed: backbone, memory, kNN-LM, RAG\n",
             f"Machine: {results['machine']['cpu']}, {results['machine']['threads']} threads, torch "
             f"{results['machine']['torch']}. Prompt {cfg['prompt_tokens']} tokens, {cfg['new_tokens']} new tokens "
             f"(greedy, KV cache), {cfg['warmup']} warm-up + {cfg['repeats']} interleaved repetitions; median "
             f"[min-max]. Run `{results['run_config']}`; memory λ = {results['info']['memory']['lambda']} (the run "
             f"chose {results['info']['chosen_lambda']['memory']}), {results['info']['memory']['layers']} blocks, "
             f"tied head {results['info']['memory']['tie_head']}.\n"]
    header = ["method", "batch", "input tokens", "TTFT ms", "TTFT / backbone", "decode tok/s", "decode / backbone"]
    rows = []
    for name, by_batch in results["methods"].items():
        for b, e in sorted(by_batch.items(), key=lambda kv: int(kv[0])):
            r = results["ratios"][name][b]
            rows.append([name, b, e["input_tokens"],
                         f"{1e3 * e['ttft_s']['median']:.1f} [{1e3 * e['ttft_s']['min']:.1f}-{1e3 * e['ttft_s']['max']:.1f}]",
                         f"{r['ttft_vs_backbone']:.3f}",
                         f"{e['decode_tok_s']['median']:.1f} [{e['decode_tok_s']['min']:.1f}-{e['decode_tok_s']['max']:.1f}]",
                         f"{r['decode_vs_backbone']:.3f}"])
    rows.sort(key=lambda r: (int(r[1]), list(results["methods"]).index(r[0])))
    lines += [markdown_table(header, rows), "", "## Against the paper (batch 1)", "",
              markdown_table(["ratio", "measured", "paper (Fig. 1)", "target"], targets(results)), ""]
    lim = results["limits"]
    lines += ["## Weight-bound limit of the memory's decode ratio (batch 1)", "",
              f"Backbone weights {lim['backbone_bytes'] / 2**20:.1f} MiB, memory extra "
              f"{lim['memory_extra_bytes'] / 2**20:.1f} MiB, tied head {lim['head_bytes'] / 2**20:.1f} MiB: limit "
              f"{lim['decode_ratio_limit_fused']:.3f} with the fused head, "
              f"{lim['decode_ratio_limit_separate_heads']:.3f} with two head reads.", ""]
    mix = results["mixing"]
    lines += [f"Mixing one step (B=1, V={results['info'].get('vocab', '')}): one-pass "
              f"{1e6 * mix['one_pass']['median']:.0f} µs, two log_softmax + logaddexp "
              f"{1e6 * mix['two_log_softmax']['median']:.0f} µs.", ""]
    info = results["info"]
    q = info.get("bf16_quality")
    if q:
        lines.append(f"Memory blocks in bf16 (`memory:bf16`), first {q['positions']} validation positions: memory-only "
                     f"PPL {q['fp32_memory_ppl']:.3f} (fp32) vs {q['bf16_memory_ppl']:.3f} (bf16); mixed at "
                     f"λ={q['lambda']}: {q['fp32_joint_ppl']:.3f} vs {q['bf16_joint_ppl']:.3f} (backbone "
                     f"{q['backbone_ppl']:.3f}).\n")
    if "knnlm" in info:
        k = info["knnlm"]
        lines.append(f"kNN-LM: {k['keys']:,} keys, IVF-PQ nlist {k['index']['nlist']}, nprobe {k['index']['nprobe']}, "
                     f"{k['index']['pq_bytes']}-byte codes, rerank {k['index']['rerank']}; k={k['k']}, "
                     f"T={k['temperature']}, λ={k['lambda']}.")
    if "rag" in info:
        r, m = info["rag"], results["methods"]["rag"]["1"]
        retriever = "dense all-MiniLM-L6-v2" if r["retriever"] == "dense" else "BM25 (bm25s)"
        lines.append(f"RAG: {retriever} over {r['passages']} passages, top {r['top_k']}, prompt limit "
                     f"{r['max_prompt_tokens']} tokens; retrieval {1e3 * m['retrieval_s']['median']:.1f} ms of the "
                     f"batch-1 TTFT (median).")
    for name in ("knnlm", "knnlm-exact"):
        if name in results["methods"]:
            m = results["methods"][name]["1"]
            lines.append(f"{name} search: {1e3 * m['search_s']['median']:.0f} ms per batch-1 generation of "
                         f"{cfg['new_tokens']} tokens (median), i.e. "
                         f"{1e3 * m['search_s']['median'] / cfg['new_tokens']:.1f} ms per token.")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path:
    """Two bar panels like the paper's Fig. 1: TTFT (ms) and decode tokens/s at batch 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("backbone", "memory", "rag", "knnlm", "knnlm-exact") if n in results["methods"]]
    labels = {"backbone": "Backbone", "memory": "Backbone\n+ MLP Memory", "rag": "RAG", "knnlm": "kNN-LM\n(IVF-PQ)",
              "knnlm-exact": "kNN-LM\n(exact)"}
    ttft = [1e3 * results["methods"][n]["1"]["ttft_s"]["median"] for n in names]
    tps = [results["methods"][n]["1"]["decode_tok_s"]["median"] for n in names]
    colors = ["#7f7f7f", "#2ca02c", "#1f77b4", "#d62728", "#9467bd"][: len(names)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, values, title, unit in ((axes[0], ttft, "Time to first token (lower is better)", "ms"),
                                    (axes[1], tps, "Decoding speed (higher is better)", "tokens/s")):
        bars = ax.bar([labels[n] for n in names], values, color=colors)
        for bar, value in zip(bars, values):
            ratio = value / values[0]
            ax.annotate(f"{value:.1f}\n({ratio:.2f}x)", (bar.get_x() + bar.get_width() / 2, value),
                        ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.set_ylim(0, max(values) * 1.3)
    fig.suptitle(f"SmolLM2-135M, batch 1, {results['machine']['threads']} CPU threads", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(config_path: str, cfg: InferBenchConfig, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    results = run_bench(config_path, cfg, progress)
    results["seconds_total"] = time.perf_counter() - t0
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "results.json", json.dumps(results, indent=1, default=str))
    text = report(results)
    write_text(out / "report.md", text)
    plot(results, out / "speed.png")
    print(text)
    print(f"results: {out / 'results.json'}, figure: {out / 'speed.png'}")
    return results
