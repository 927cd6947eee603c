"""Planted associative recall: the smallest test of learning from context.

A sequence of random tokens holds one (key, value) pair at a random place; it ends with the key again,
and the model must predict the value. The key occurs nowhere else. Memory Mosaics store exactly such
pairs (k_i from x_i, v_i from x_{i+1}) in one block; a Transformer needs two attention layers that form an
induction circuit. ``compare`` trains tiny models of both kinds on fresh batches and measures recall on
held-out sequences (chance: 1 / (vocab - 2)).
"""

from __future__ import annotations

import numpy as np
import torch

from memory_mosaics.config import MosaicsConfig
from memory_mosaics.model import MosaicsForCausalLM
from memory_mosaics.transformer import build_transformer, count_parameters


def recall_batch(rng: np.random.Generator, batch: int, length: int, vocab: int):
    """(inputs (B, length), values (B,)): random tokens from [2, vocab), a planted pair, the key at the end."""
    x = rng.integers(2, vocab, size=(batch, length))
    keys = rng.integers(2, vocab, size=batch)
    for b in range(batch):
        x[b][x[b] == keys[b]] = 1  # the key occurs only where planted
        x[b, rng.integers(0, length - 3)] = keys[b]
        x[b, -1] = keys[b]
    values = x[np.arange(batch), (x[:, :-1] == keys[:, None]).argmax(1) + 1]
    return torch.from_numpy(x), torch.from_numpy(values)


def recall_config(layers: int, vocab: int = 24, hidden: int = 32) -> MosaicsConfig:
    return MosaicsConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                         intermediate_size=hidden, short_window=32, long_gap_min=4, long_gap_max=8, long_gap_eval=4,
                         scan_chunk=4)


def train_recall(model, steps: int = 150, vocab: int = 24, length: int = 20, lr: float = 1e-2, seed: int = 0) -> float:
    """Train on the last position only; return held-out recall accuracy (200 sequences)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        x, y = recall_batch(rng, 32, length, vocab)
        loss = torch.nn.functional.cross_entropy(model(x, logits_to_keep=1).logits[:, -1], y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    x, y = recall_batch(np.random.default_rng(seed + 1), 200, length, vocab)
    with torch.no_grad():
        return (model(x, logits_to_keep=1).logits[:, -1].argmax(-1) == y).float().mean().item()


def compare(layers=(1, 2), steps: int = 150, seed: int = 0) -> list[dict]:
    """Recall accuracy of tiny Memory Mosaics and matched Transformers of each depth."""
    rows = []
    for n in layers:
        for kind in ("mosaics", "transformer"):
            torch.manual_seed(seed)
            cfg = recall_config(n)
            model = MosaicsForCausalLM(cfg) if kind == "mosaics" else build_transformer(cfg, seed)
            rows.append({"kind": kind, "layers": n, "parameters": count_parameters(model),
                         "accuracy": 100 * train_recall(model, steps, seed=seed)})
    return rows
