"""The matched baseline: a Llama-style Transformer (RoPE, RMSNorm, SwiGLU, multi-head attention).

Built from transformers' ``LlamaConfig``/``LlamaForCausalLM`` at the Memory Mosaics widths (hidden size,
depth, heads, vocabulary, tied embeddings). Its SwiGLU width is chosen so that the total parameter count
matches the Memory Mosaics model as closely as an integer width allows (two associative memories plus a
2d -> d W_o hold 6d^2 + O(d) weights per block against attention's 4d^2; the difference goes to the MLP).

Document-wise masking: a 4D boolean mask (B, 1, T, T) allows position t to attend to i <= t of its own
document only, and RoPE positions restart at every document start.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from memory_mosaics.config import MosaicsConfig
from memory_mosaics.memory_layers import long_term_mask, same_document, short_term_mask


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied head counts once)."""
    return sum(p.numel() for p in model.parameters())


def _llama_params(mm: MosaicsConfig, intermediate: int) -> int:
    d, L, V = mm.hidden_size, mm.num_hidden_layers, mm.vocab_size
    return V * d + L * (4 * d * d + 3 * d * intermediate + 2 * d) + d


def _mosaics_params(mm: MosaicsConfig) -> int:
    d, L, V, H = mm.hidden_size, mm.num_hidden_layers, mm.vocab_size, mm.num_attention_heads
    memory = 2 * d * d + 2 * d * H + 5 * H  # W_phi, W_psi, W_g, W_lam, five per-head scalars
    return V * d + L * (2 * memory + 2 * d * d + 3 * d * mm.intermediate_size + 2 * d) + d


def matched_intermediate_size(mm: MosaicsConfig) -> int:
    """SwiGLU width of the Transformer whose parameter count is nearest to the Memory Mosaics model's."""
    target = _mosaics_params(mm)
    per_unit = 3 * mm.hidden_size * mm.num_hidden_layers
    base = _llama_params(mm, 0)
    return max(1, round((target - base) / per_unit))


def transformer_config(mm: MosaicsConfig, max_positions: int = 8192) -> LlamaConfig:
    """The Llama configuration matched to a Memory Mosaics configuration."""
    return LlamaConfig(vocab_size=mm.vocab_size, hidden_size=mm.hidden_size,
                       intermediate_size=matched_intermediate_size(mm), num_hidden_layers=mm.num_hidden_layers,
                       num_attention_heads=mm.num_attention_heads, num_key_value_heads=mm.num_attention_heads,
                       max_position_embeddings=max_positions, rms_norm_eps=mm.rms_norm_eps,
                       initializer_range=mm.initializer_range, tie_word_embeddings=mm.tie_word_embeddings,
                       attention_bias=False, mlp_bias=False, rope_theta=10000.0)


def build_transformer(mm: MosaicsConfig, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(transformer_config(mm))


# ---------------------------------------------------------------------------------------------
# Document-wise masking for the Transformer


def document_attention_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, 1, T, T) boolean: causal and inside the document."""
    T = doc_ids.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return (same_document(doc_ids) & causal)[:, None]


def document_positions(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) RoPE positions that restart at 0 at every document start."""
    T = doc_ids.shape[1]
    t = torch.arange(T, device=doc_ids.device).expand_as(doc_ids)
    start = torch.ones_like(doc_ids, dtype=torch.bool)
    start[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    first = torch.cummax(torch.where(start, t, torch.zeros_like(t)), dim=1).values  # (B, T): start of own doc
    return t - first


def forward_documents(model, input_ids: torch.Tensor, doc_ids: torch.Tensor, labels=None):
    """One forward of either model family on packed documents; returns the HF output (loss if labels)."""
    if isinstance(model, LlamaForCausalLM):
        out = model(input_ids=input_ids, attention_mask=document_attention_mask(doc_ids),
                    position_ids=document_positions(doc_ids), use_cache=False)
        if labels is not None:
            out.loss = torch.nn.functional.cross_entropy(out.logits[:, :-1].flatten(0, 1).float(),
                                                         labels[:, 1:].flatten(), ignore_index=-100)
        return out
    return model(input_ids=input_ids, document_ids=doc_ids, labels=labels)


# ---------------------------------------------------------------------------------------------
# FLOPs per token (forward, multiply-add = 2 FLOPs)


def flops_per_token(model, seq_len: int) -> dict:
    """Forward FLOPs per token at context length ``seq_len``, averaged over the positions of one sequence.

    ``matmul``: 2 x the weights of every matrix product (embedding lookup excluded, LM head included).
    ``context``: token mixing. Transformer: QK^T and AV over the t causal keys, 4 d per key and layer.
    Memory Mosaics: the same 4 d per retrieved pair, pairs counted from the short and long masks at the
    inference gap m, plus the key recurrence (3 d per token and memory: g k~ + lam kbar).
    """
    cfg = model.config
    d, L = cfg.hidden_size, cfg.num_hidden_layers
    weights = sum(p.numel() for n, p in model.named_parameters() if p.ndim == 2 and "embed_tokens" not in n)
    if cfg.tie_word_embeddings:
        weights += cfg.vocab_size * d  # the tied head is a matrix product too
    doc = torch.zeros(1, seq_len, dtype=torch.long)
    if isinstance(model, LlamaForCausalLM):
        pairs = document_attention_mask(doc).sum().item() / seq_len
        context = L * 4 * d * pairs
    else:
        pairs = (short_term_mask(doc, cfg.short_window).sum() + long_term_mask(doc, cfg.long_gap_eval).sum()).item()
        context = L * (4 * d * pairs / seq_len + 2 * 3 * d)
    return {"matmul": 2 * weights, "context": context, "total": 2 * weights + context}
