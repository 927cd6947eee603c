"""One Memory Mosaics v2 block: contextual memory (short + long term) and persistent memory, pre-norm.

    h = x + W_o [short(RMSNorm(x)) ; long(RMSNorm(x))]       (heads of both memories concatenated)
    y = h + SwiGLU(RMSNorm(h))                                (persistent memory, transformers' LlamaMLP)

Attribute names follow Llama (``input_layernorm``, ``post_attention_layernorm``, ``mlp``) so that the
project's key capture (``mlpmem.backbone.KeyHook``, site ``ffn_input`` = the input of ``mlp``) works as is.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

from memory_mosaics.config import MosaicsConfig
from memory_mosaics.memory_layers import AssociativeMemory


class ContextualMemory(nn.Module):
    """Short-term and long-term associative memories, concatenated and projected with W_o."""

    def __init__(self, config: MosaicsConfig):
        super().__init__()
        self.short = AssociativeMemory(config)
        self.long = AssociativeMemory(config)
        self.o_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)  # W_o

    def forward(self, x, doc_ids, short_mask, long_mask, reference: bool = False):
        s = self.short(x, doc_ids, short_mask, reference)  # (B, T, d)
        lt = self.long(x, doc_ids, long_mask, reference)  # (B, T, d)
        return self.o_proj(torch.cat([s, lt], dim=-1))


class MosaicsBlock(nn.Module):
    def __init__(self, config: MosaicsConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.memory = ContextualMemory(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)  # persistent memory: SwiGLU (gate_proj, up_proj, down_proj)

    def forward(self, x, doc_ids, short_mask, long_mask, reference: bool = False):
        x = x + self.memory(self.input_layernorm(x), doc_ids, short_mask, long_mask, reference)
        return x + self.mlp(self.post_attention_layernorm(x))
