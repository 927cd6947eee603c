"""Tiny random backbones and a stub tokenizer shared by the memory/loss/mixed tests (seconds each)."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB = 128
PAD = 0


class TinyTokenizer:
    """Only what fingerprints and generate need: a vocabulary and the pad/eos ids."""

    pad_token_id = PAD
    eos_token_id = None

    def __init__(self, vocab_size: int = VOCAB, salt: str = ""):
        self.vocab = {f"{salt}tok{i}": i for i in range(vocab_size)}

    def get_vocab(self) -> dict:
        return dict(self.vocab)


def tiny_llama(seed: int = 0, init_range: float = 0.2) -> LlamaForCausalLM:
    """A 2-layer Llama; a large init range spreads the logits, so greedy decoding has no near-ties."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=init_range,
        pad_token_id=PAD, bos_token_id=None, eos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(seed: int = 0, init_range: float = 0.2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, initializer_range=init_range,
        pad_token_id=PAD, bos_token_id=None, eos_token_id=None,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config).eval()


BUILDERS = {"llama": tiny_llama, "gpt2": tiny_gpt2}


def tiny_backbone(family: str, seed: int = 0) -> torch.nn.Module:
    return BUILDERS[family](seed)


def left_padded(sequences: list[list[int]], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) for a batch, padded on the left."""
    width = max(len(s) for s in sequences)
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
    return ids, mask
