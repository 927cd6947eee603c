"""Data for the two models: one tokenizer, token streams of packed documents, seeded training windows.

Tokenizer: either a byte-level BPE trained with the ``tokenizers`` library on the training split only
(``kind: bpe``, small vocabulary: cheap embeddings and softmax, which is what a 2-core budget can train)
or the shipped SmolLM2 tokenizer (``kind: smollm2``, 49,152 tokens). Both models always share it.

A split is stored as two int32 arrays of equal length: ``tokens`` (documents concatenated in order) and
``docs`` (the document index of every token). A training window of T tokens starts at a seeded random
offset of the stream; its document ids make the masks, and the label of the first token of every document
inside the window is -100 (no prediction across a document boundary).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from mlpmem.backbone import ensure_shipped
from mlpmem.corpora.documents import SPLITS
from mlpmem.corpora.registry import prepare
from mlpmem.corpora.store import read_split
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.freshness import check
from mlpmem.utils.shards import read_json, write_json

SPECIAL_TOKENS = ["<|endoftext|>", "<pad>"]


def train_bpe(texts: list[str], vocab_size: int, out_dir: Path):
    """A byte-level BPE trained on ``texts``, saved to ``out_dir`` and returned as a fast tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   pad_token="<pad>")
    fast.save_pretrained(out_dir)
    return fast


def load_tokenizer(kind: str, texts: list[str], vocab_size: int, out_dir: Path):
    """The experiment's tokenizer: trained once (bpe) or the shipped SmolLM2 one, cached in ``out_dir``."""
    if (out_dir / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(out_dir)
    if kind == "bpe":
        return train_bpe(texts, vocab_size, out_dir)
    if kind == "smollm2":
        tok = AutoTokenizer.from_pretrained(ensure_shipped("smollm2-135m"))
        tok.save_pretrained(out_dir)
        return tok
    raise ConfigError(f"tokenizer kind must be bpe or smollm2, got {kind!r}")


def encode_documents(tokenizer, texts: list[str], progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, docs) int32 arrays of the concatenated documents."""
    tokens, docs = [], []
    for i, text in enumerate(tqdm(texts, desc="tokenize", disable=not progress)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        tokens.append(np.asarray(ids, np.int32))
        docs.append(np.full(len(ids), i, np.int32))
    if not tokens or sum(map(len, tokens)) < 2:
        raise CorpusError("no tokens to train or evaluate on")
    return np.concatenate(tokens), np.concatenate(docs)


def save_stream(path: Path, tokens: np.ndarray, docs: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, tokens=tokens, docs=docs)
    tmp.rename(path)


def load_stream(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return data["tokens"], data["docs"]


def labels_for(input_ids: torch.Tensor, doc_ids: torch.Tensor) -> torch.Tensor:
    """Labels = inputs, with -100 on every token that starts a document after position 0 (not predictable)."""
    labels = input_ids.clone()
    labels[:, 1:][doc_ids[:, 1:] != doc_ids[:, :-1]] = -100
    return labels


def window_batch(tokens: np.ndarray, docs: np.ndarray, starts: np.ndarray, seq_len: int) -> dict:
    """Windows ``tokens[s:s+seq_len]`` for each start: input_ids, document ids, labels (B, T)."""
    idx = starts[:, None] + np.arange(seq_len)[None, :]
    input_ids = torch.from_numpy(tokens[idx].astype(np.int64))
    doc_ids = torch.from_numpy(docs[idx].astype(np.int64))
    return {"input_ids": input_ids, "doc_ids": doc_ids, "labels": labels_for(input_ids, doc_ids)}


def training_starts(n_tokens: int, seq_len: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Seeded random window starts of one step (a function of (seed, step) only: resumable)."""
    if n_tokens <= seq_len:
        raise CorpusError(f"the training stream ({n_tokens} tokens) is shorter than one window ({seq_len})")
    return np.random.default_rng([seed, step]).integers(0, n_tokens - seq_len, size=batch_size)


def evaluation_starts(n_tokens: int, seq_len: int) -> np.ndarray:
    """Non-overlapping windows covering the stream (the tail shorter than a window is dropped)."""
    return np.arange(0, n_tokens - seq_len + 1, seq_len)


def check_data_settings(out: Path, exp) -> None:
    """Record which text and tokenizer ``out`` holds streams of; refuse to reuse them for other settings."""
    settings = {"corpus": exp.corpus, "extra_train": list(exp.extra_train), "tokenizer": exp.tokenizer,
                "vocab_size": exp.vocab_size}
    path = out / "data" / "settings.json"
    if path.is_file():
        check(read_json(path, "mosaics data settings"), settings, f"the data and tokenizer of {out}",
              error=ConfigError)
    elif (out / "tokenizer").exists() or (out / "data").exists():
        raise ConfigError(f"{out} holds data and a tokenizer that record no settings: delete them and rerun")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, settings)


def prepare_streams(exp, progress: bool = True) -> tuple[object, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Tokenizer and the three token streams of an experiment, built once under ``out_dir``."""
    out = Path(exp.out_dir)
    check_data_settings(out, exp)
    folder = prepare(exp.corpus)
    texts = {split: [doc["text"] for doc in read_split(folder, split)] for split in SPLITS}
    for name in exp.extra_train:
        texts["train"] += [doc["text"] for doc in read_split(prepare(name), "train")]
    tokenizer = load_tokenizer(exp.tokenizer, texts["train"], exp.vocab_size, out / "tokenizer")
    streams = {}
    for split in SPLITS:
        path = out / "data" / f"{split}.npz"
        if not path.is_file():
            save_stream(path, *encode_documents(tokenizer, texts[split], progress))
        streams[split] = load_stream(path)
    return tokenizer, streams
