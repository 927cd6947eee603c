"""Write a tiny random Llama backbone (with a byte-level BPE tokenizer) and a small text corpus into a folder, for a
run of the ``tiny`` preset: ``python tiny_inputs.py DIR`` writes ``DIR/backbone/`` and ``DIR/corpus/``.

It imports only transformers and tokenizers, so that the wheel check runs the installed package, not the checkout.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXT = (
    "The old lighthouse keeper walked along the shore every morning. He counted the gulls and the boats, "
    "and wrote their numbers in a small green book. When the storm came in November, the boats stayed "
    "home and the gulls flew inland. The keeper lit the lamp early and watched the waves break on the "
    "rocks below the tower. In spring the fishermen returned, and the keeper began his counting again. "
)


def documents(count: int, seed: int = 0) -> list[str]:
    """``count`` documents of 6 to 12 sentences of TEXT, shuffled (deterministic)."""
    sentences = [s.strip() + "." for s in TEXT.split(".") if s.strip()]
    rng = random.Random(seed)
    return [" ".join(rng.choice(sentences) for _ in range(rng.randint(6, 12))) for _ in range(count)]


def tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["<|endoftext|>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<unk>", pad_token="<pad>")


def main(out: Path) -> None:
    docs = documents(10)
    corpus = out / "corpus"
    corpus.mkdir(parents=True)
    for i, text in enumerate(docs):
        (corpus / f"doc{i}.txt").write_text(text)
    tok = tokenizer([TEXT] * 4 + docs)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=512)
    LlamaForCausalLM(config).save_pretrained(out / "backbone")
    tok.save_pretrained(out / "backbone")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
