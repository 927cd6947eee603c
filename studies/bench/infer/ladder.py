"""The memory without one decode optimization each (the ladder), and with its blocks stored in bf16.

``memory:naive`` runs the memory (own head) on every prompt position and mixes through two log_softmax
tensors; ``memory:+kept`` only on the kept positions; ``memory:+fused`` adds the fused head (a tied head's
two vocabulary projections in one product); ``memory`` is all of them with the one-pass mixing; ``memory:bf16``
the same with bf16 blocks. All compute the same distribution (bf16: up to rounding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mlpmem.backbone import keep_positions
from mlpmem.datastore import KeyStore
from mlpmem.errors import MlpmemError
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import mix
from mlpmem.inference.perplexity import perplexity
from mlpmem.memory import MemoryConfig, MLPMemory, tie_to_backbone
from mlpmem.training.data import memory_logprobs


class _SlowMix(MemoryAugmentedForCausalLM):
    """Mixing through two full log_softmax tensors, then logaddexp (``mix`` on log-probabilities)."""

    def mixture(self, lm_logits, mem_logits, keys=None):
        return mix(F.log_softmax(lm_logits.float(), -1), F.log_softmax(mem_logits.float(), -1), self.lam, logits=False)


class _AllPositions(_SlowMix):
    """The memory (own head) on every position of the input, sliced afterwards: the unoptimized prefill."""

    def memory_logits(self, keys, lm_logits, logits_to_keep):
        param = next(self.memory.parameters())
        every = self.memory(keys.to(device=param.device, dtype=param.dtype))  # (B, T, V)
        return keep_positions(every, lm_logits, logits_to_keep)


def shares_head(backbone, memory) -> bool:
    """Whether the memory's head is the backbone's output embedding itself (what the fused head needs); a corpus
    head is a copy of some of its rows, an untied head its own matrix."""
    return memory.config.tie_head and memory.head.weight is backbone.get_output_embeddings().weight


def memory_variants(backbone, memory, lam: float) -> dict[str, MemoryAugmentedForCausalLM]:
    """The memory without each decode optimization, and with its blocks stored in bf16 (``memory:bf16``);
    ``memory:+fused`` only where the head can be fused (:func:`ladder_notes` says why it is not there)."""
    variants = {"memory:naive": _AllPositions.from_parts(backbone, memory, lam, fuse_head=False),
                "memory:+kept": _SlowMix.from_parts(backbone, memory, lam, fuse_head=False)}
    if shares_head(backbone, memory):
        variants["memory:+fused"] = _SlowMix.from_parts(backbone, memory, lam, fuse_head=True)
    variants["memory:bf16"] = MemoryAugmentedForCausalLM.from_parts(backbone, bf16_copy(memory, backbone), lam)
    return variants


def ladder_notes(backbone, memory) -> list[str]:
    """One line per ladder step left out for this memory, and why."""
    if shares_head(backbone, memory):
        return []
    head = ("a corpus head (a copy of some of the output embedding's rows)" if memory.config.tie_head
            else "its own untied head")
    return [f"memory:+fused skipped: the memory has {head}, so there is no shared head to fuse"]


def bf16_copy(memory, backbone):
    """A copy of ``memory`` whose own weights are bf16 (a tied head stays the backbone's fp32 tensor)."""
    clone = MLPMemory(MemoryConfig.from_dict(memory.config.to_dict()))
    clone.load_state_dict(memory.state_dict())
    if memory.config.tie_head:
        tie_to_backbone(clone, backbone)
    return clone.cast_weights(torch.bfloat16).eval()


@torch.no_grad()
def bf16_quality(memory, backbone, run_dir: Path, lam: float, positions: int = 4096) -> dict | None:
    """Memory-only and mixed perplexity of the fp32 and the bf16-weight memory on validation positions."""
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
        out[f"{name}_joint_ppl"] = perplexity(mix(lm, lp, lam, logits=False))
    return out
