"""Shared tiny fixtures: a BPE tokenizer trained on a few KB, tiny random Llama / GPT-2 backbones."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")

import random

import pytest
import torch

TEXT = (
    "The old lighthouse keeper walked along the shore every morning. He counted the gulls and the boats, "
    "and wrote their numbers in a small green book. When the storm came in November, the boats stayed "
    "home and the gulls flew inland. The keeper lit the lamp early and watched the waves break on the "
    "rocks below the tower. In spring the fishermen returned, and the keeper began his counting again. "
)


def corpus_text(n_docs: int = 6, seed: int = 0) -> list[str]:
    """Small documents made of shuffled sentences of TEXT (deterministic)."""
    sentences = [s.strip() + "." for s in TEXT.split(".") if s.strip()]
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        picked = [rng.choice(sentences) for _ in range(rng.randint(6, 12))]
        docs.append(" ".join(picked))
    return docs


def write_corpus(folder, n_docs: int):
    """A folder of ``n_docs`` small text documents (``corpus_text``), one ``doc<i>.txt`` each; returns it."""
    folder.mkdir()
    for i, text in enumerate(corpus_text(n_docs)):
        (folder / f"doc{i}.txt").write_text(text)
    return folder


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["<|endoftext|>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT] * 4 + corpus_text(20), trainer)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<unk>", pad_token="<pad>")


def make_llama(vocab_size: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def make_gpt2(vocab_size: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=3, n_head=4, n_positions=512)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer):
    return make_llama(len(tiny_tokenizer))


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_tokenizer):
    return make_gpt2(len(tiny_tokenizer))


@pytest.fixture(scope="session")
def tiny_backbone_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """A tiny Llama saved as a local folder, loadable by name with ``load_backbone``."""
    path = tmp_path_factory.mktemp("backbone")
    tiny_llama.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    random.seed(0)


@pytest.fixture()
def subprocess_stage_env(monkeypatch):
    """For tests that run stages in worker subprocesses: no fsync (MLPMEM_FSYNC=0: a kill keeps the page cache,
    and fsync on a busy disk costs seconds per file) and one thread everywhere (tiny models; no oversubscription
    between the test process and its workers)."""
    import mlpmem.utils.shards

    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_FSYNC", "0")
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
