"""``python -m studies bench gate``: ``mlpmem gate`` plus the gate's decode speed against the fixed λ.

The gate is trained, scored and reported as ``mlpmem gate`` does (:func:`mlpmem.cli.gate.gate_measured`); its
entry also gets the decode timing (:func:`decode_speed`), which the gate report shows beside it.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import torch

from mlpmem.cli.gate import gate_measured
from mlpmem.compute import model_device
from mlpmem.errors import MlpmemError
from mlpmem.inference.gate import gate_features
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import mix
from mlpmem.memory import MLPMemory
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.run import Run


def cmd_bench_gate(args: argparse.Namespace) -> None:
    if args.decode_tokens < 1 or args.decode_rounds < 1:
        raise MlpmemError("--decode-tokens and --decode-rounds must be >= 1")
    measure = functools.partial(decode_speed, new_tokens=args.decode_tokens, rounds=args.decode_rounds)
    entry = gate_measured(args, measure)
    print(f"decode gate/fixed {entry['decode_ratio']:.3f}")


@torch.no_grad()
def decode_speed(run: Run, memory: MLPMemory, gate, lam: float, new_tokens: int, rounds: int) -> dict:
    """Greedy decode tokens/s at batch 1 with the gate and with the fixed λ, in one process: each round times
    both back to back (the order alternates), and the ratio is the median of the rounds' ratios, so that a
    load that drifts between rounds cancels. Beside it, the mixing step alone, timed on this run's logits."""
    model, tokenizer = run.backbone
    mixed = MemoryAugmentedForCausalLM.from_parts(model, memory, lam=lam, tokenizer=tokenizer)
    prompt = torch.from_numpy(np.asarray(split_tokens(run, "test")[0][:16], np.int64))[None].to(model_device(model))
    kwargs = dict(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                  min_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    tps: dict[str, list[float]] = {"gate": [], "fixed": []}
    for r in range(rounds + 1):  # round 0 warms up
        for name in (("gate", "fixed") if r % 2 else ("fixed", "gate")):
            mixed.set_gate(gate if name == "gate" else None)
            started = time.perf_counter()
            mixed.generate(**kwargs)
            if r:
                tps[name].append(new_tokens / (time.perf_counter() - started))
    ratios = np.array(tps["gate"]) / np.array(tps["fixed"])  # (rounds,)
    return {"decode_tok_s_gate": float(np.median(tps["gate"])), "decode_tok_s_fixed": float(np.median(tps["fixed"])),
            "decode_ratio": float(np.median(ratios)),
            "decode_ratio_quartiles": [float(q) for q in np.quantile(ratios, [0.25, 0.75])],
            "new_tokens": new_tokens, "rounds": rounds, "threads": torch.get_num_threads(),
            **mixing_cost(model, memory, gate, lam)}


def mixing_cost(model, memory: MLPMemory, gate, lam: float, repeats: int = 300) -> dict:
    """Milliseconds of one decode step's mixing (batch 1, one position, this vocabulary) with the gate and with
    the fixed λ: the part of a step the gate changes, measured without the backbone's noise."""
    vocab = model.get_output_embeddings().weight.shape[0]
    torch.manual_seed(0)
    lm, mem = torch.randn(1, 1, vocab), memory.to_vocab(torch.randn(1, 1, memory.head.weight.shape[0]))  # (1, 1, V)
    keys = torch.randn(1, 1, memory.config.input_size)
    steps = {"fixed": lambda: mix(lm, mem, lam),
             "gate": lambda: mix(lm, mem, gate.mixing_logits(gate_features(lm, mem), keys))}
    out = {}
    for name, step in steps.items():
        for _ in range(20):
            step()
        started = time.perf_counter()
        for _ in range(repeats):
            step()
        out[f"mix_ms_{name}"] = 1e3 * (time.perf_counter() - started) / repeats
    return out
