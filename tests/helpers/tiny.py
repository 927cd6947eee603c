"""The one factory of tiny random backbones (seconds each), and the two tokenizers they pair with.

Two presets, one per tokenizer:

- ``stub`` (the default) pairs with ``TinyTokenizer``: 128 ids, pad 0, no bos/eos; 2 layers, no dropout, and a
  large init range that spreads the logits, so greedy decoding has no near-ties.
- ``bpe`` pairs with ``bpe_tokenizer`` (the ``tiny_tokenizer`` fixture; pass ``vocab_size=len(tokenizer)``):
  transformers' default init, special ids and dropout; 3 layers, 512 positions, Llama's head tied to its embedding.

A preset fixes the whole config, so a test gets the same weights for the same (family, seed, vocab_size, preset).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from helpers.corpus import TEXT, corpus_text
from mlpmem.memory import MemoryConfig, MLPMemory, size_for_backbone

VOCAB = 128
PAD = 0

MODELS = {"llama": (LlamaConfig, LlamaForCausalLM), "gpt2": (GPT2Config, GPT2LMHeadModel)}
WIDTH = {  # every preset's width: hidden 32, 4 heads (Llama: intermediate 64, 2 kv heads)
    "llama": dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2),
    "gpt2": dict(n_embd=32, n_head=4),
}
NO_SPECIAL_IDS = dict(pad_token_id=PAD, bos_token_id=None, eos_token_id=None)
PRESETS = {
    "stub": {
        "llama": dict(num_hidden_layers=2, initializer_range=0.2, **NO_SPECIAL_IDS),
        "gpt2": dict(n_layer=2, initializer_range=0.2, **NO_SPECIAL_IDS, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0),
    },
    "bpe": {
        "llama": dict(num_hidden_layers=3, max_position_embeddings=512, tie_word_embeddings=True),
        "gpt2": dict(n_layer=3, n_positions=512),
    },
}


def tiny_backbone(family: str = "llama", seed: int = 0, *, vocab_size: int = VOCAB,
                  preset: str = "stub") -> PreTrainedModel:
    """A tiny random ``family`` ("llama" or "gpt2") model in eval mode, its weights drawn from ``seed``."""
    config_class, model_class = MODELS[family]
    torch.manual_seed(seed)
    config = config_class(vocab_size=vocab_size, **WIDTH[family], **PRESETS[preset][family])
    return model_class(config).eval()


class TinyTokenizer:
    """Only what fingerprints and generate need: a vocabulary and the pad/eos ids (pairs with the stub preset)."""

    pad_token_id = PAD
    eos_token_id = None

    def __init__(self, vocab_size: int = VOCAB, salt: str = ""):
        self.vocab = {f"{salt}tok{i}": i for i in range(vocab_size)}

    def get_vocab(self) -> dict:
        return dict(self.vocab)


def bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the tiny corpus (pairs with the bpe preset)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["<|endoftext|>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT] * 4 + corpus_text(20), trainer)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<unk>", pad_token="<pad>")


def left_padded(sequences: list[list[int]], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) for a batch, padded on the left."""
    width = max(len(s) for s in sequences)
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
    return ids, mask


def memory_config_for(backbone, preset: str = "tiny", key_layer: int | float = -1, key_site: str = "ffn_input",
                      tokenizer=None, head_vocab_size: int | None = None, **options) -> MemoryConfig:
    """A ``preset`` memory config sized for ``backbone``'s keys; untied unless ``tie_head=True`` is given (a test's
    memory stands alone unless it ties it)."""
    config = MemoryConfig(preset=preset, **{"tie_head": False, **options})
    return size_for_backbone(config, backbone, tokenizer, key_layer, key_site, head_vocab_size)


def seeded_memory(seed: int, input_size: int = 8, vocab_size: int = 20, **config) -> MLPMemory:
    """A one-block memory with an untied head, its weights drawn from ``seed`` (for tests of distributions)."""
    torch.manual_seed(seed)
    return MLPMemory(MemoryConfig(input_size=input_size, vocab_size=vocab_size, intermediate_size=16, num_layers=1,
                                  **{"tie_head": False, **config})).eval()
