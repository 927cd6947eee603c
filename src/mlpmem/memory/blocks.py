"""The memory's block: x + FFN(Norm(x)), a transformer block without its attention, and its parts.

The feed-forward is ``gated`` (down(act(gate(x)) · up(x)), bias-free: SwiGLU with SiLU) or ``plain``
(down(act(up(x))) with biases, GPT-2's); the norm RMSNorm or LayerNorm. These are the memory's own choices
(``memory.mlp`` / ``activation`` / ``norm``); their parameter names are the Llama and GPT-2 ones, so that
``init: backbone`` loads a mirrored layer's weights by name (:mod:`mlpmem.memory.sizing`).
"""

from __future__ import annotations

import torch
from torch import nn

from mlpmem.memory.config import MemoryConfig


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in fp32 like Llama's."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., H)
        return self.weight * x.to(dtype)


def activation(name: str) -> nn.Module:
    return {"silu": nn.SiLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU()}[name]


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)), bias-free (Llama's SwiGLU with SiLU)."""

    def __init__(self, act: str, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))  # (..., H)


class PlainMLP(nn.Module):
    """c_proj(act(c_fc(x))), with biases (GPT-2's, as nn.Linear rather than its transposed Conv1D)."""

    def __init__(self, act: str, hidden: int, inner: int):
        super().__init__()
        self.c_fc = nn.Linear(hidden, inner)
        self.c_proj = nn.Linear(inner, hidden)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))  # (..., H)


def make_mlp(kind: str, act: str, hidden: int, inner: int) -> nn.Module:
    return (GatedMLP if kind == "gated" else PlainMLP)(act, hidden, inner)


def make_norm(kind: str, size: int, eps: float) -> nn.Module:
    return RMSNorm(size, eps) if kind == "rmsnorm" else nn.LayerNorm(size, eps=eps)


class MemoryBlock(nn.Module):
    """x + Dropout(FFN(Norm(x))) (dropout 0 by default)."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        self.norm = make_norm(config.norm, config.width, config.norm_eps)
        self.mlp = make_mlp(config.mlp, config.activation, config.width, config.intermediate_size)
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.mlp(self.norm(x)))  # (..., H)
