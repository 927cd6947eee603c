"""Closed-book (or retrieval-augmented) QA scoring: greedy decoding with stop strings, SQuAD EM / F1.

``model`` is anything with the Hugging Face ``generate`` signature: the backbone, a fine-tuned copy
(CPT, merged LoRA), :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM` (memory mixed into every
decoding step) or :class:`~mlpmem.baselines.knnlm.KnnLMDecoder` (kNN-LM at every step). Prompts are built by
``prompt_fn(questions) -> prompts`` (closed book by default, RAG passes retrieved passages); the methods
themselves are built by :mod:`mlpmem.baselines.methods`.

The tokens every prompt of a call begins with (the few-shot demonstrations) run once: their KV cache is
copied into each batch (:func:`shared_prefix`), and each row continues after it, its own tokens left-padded
behind the prefix so that the last prompt token sits at the same position in every row (the attention mask
hides the padding and positions are counted from it, so every row computes what it computes alone). Each row
decodes up to ``max_new_tokens`` tokens and the text is cut at the first stop string after any leading whitespace
(small models often open the answer with a newline, so a bare newline does not end it); a batch stops once every
row holds a stop string (:class:`AnswerEnded`).

λ for a mixed model is chosen by :func:`tune_lambda` on a validation split of the questions: highest
F1, then highest EM, ties to the smaller λ.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from tqdm.auto import tqdm
from transformers import StoppingCriteria, StoppingCriteriaList

from mlpmem.baselines.methods import METHODS, MethodOptions, build_method, closed_book_prompts
from mlpmem.compute import autocast, model_device
from mlpmem.config import Config
from mlpmem.corpora.documents import doc_start_token, read_documents
from mlpmem.errors import ConfigError, CorpusError
from studies.qa.metrics import score
from studies.qa.per_item import qa_per_item

STOP_STRINGS = ("\n", "Question:", "Context:")
"""Where a closed-book answer ends: a newline, or the next block of the prompt format."""
CLOZE_STOPS = ("\n", ".", ",", ";", " and ", " or ")


@dataclass
class GenerationConfig(Config):
    max_new_tokens: int = 16
    batch_size: int = 16
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """``fp32``, ``bf16`` (every decoding step under bf16 autocast, weights fp32) or ``auto`` (bf16 where the
    hardware computes it natively; :func:`~mlpmem.compute.resolve_precision`)."""

    def validate(self) -> None:
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError("generation max_new_tokens and batch_size must be >= 1")


def cut_at_stop(text: str, stops: tuple[str, ...] = STOP_STRINGS) -> str:
    """``text`` up to the first stop string, stripped (leading whitespace, newlines included, is skipped first)."""
    text = text.lstrip()
    cut = len(text)
    for stop in stops:
        at = text.find(stop)
        if at != -1:
            cut = min(cut, at)
    return text[:cut].strip()


def _prepare_tokenizer(tokenizer):
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@torch.no_grad()
def generate_answers(model, tokenizer, prompts: list[str], cfg: GenerationConfig | None = None,
                     stops: tuple[str, ...] = STOP_STRINGS, progress: bool = False) -> list[str]:
    """Greedy continuations of ``prompts``, each ended by an end-of-text token (:func:`end_of_text_ids`) and
    cut at the first of ``stops``."""
    cfg = cfg or GenerationConfig()
    tokenizer = _prepare_tokenizer(tokenizer)
    end_ids = end_of_text_ids(model, tokenizer)
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    precision = contextlib.nullcontext() if cfg.precision == "fp32" else autocast(model, cfg.precision)
    out = []
    with precision:
        prefix, cache = shared_prefix(model, encoded)
        for start in tqdm(range(0, len(prompts), cfg.batch_size), desc="generate", disable=not progress):
            ids, mask = _batch([row[len(prefix):] for row in encoded[start:start + cfg.batch_size]], prefix,
                               tokenizer.pad_token_id, model_device(model))
            past = None
            if cache is not None:
                past = copy.deepcopy(cache)
                past.batch_repeat_interleave(ids.shape[0])
            done = StoppingCriteriaList([AnswerEnded(tokenizer, ids.shape[1], stops)])
            generated = model.generate(input_ids=ids, attention_mask=mask, cache=past,
                                       max_new_tokens=cfg.max_new_tokens, do_sample=False, num_beams=1,
                                       pad_token_id=tokenizer.pad_token_id, eos_token_id=end_ids,
                                       stopping_criteria=done)
            new = [_until(row, end_ids) for row in generated[:, ids.shape[1]:].tolist()]
            out += [cut_at_stop(t, stops) for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    return out


class AnswerEnded(StoppingCriteria):
    """A row is done once its new text, leading whitespace skipped, holds one of ``stops``: :func:`cut_at_stop`
    cuts there, so the tokens after it are never read (a batch stops when all its rows are done)."""

    def __init__(self, tokenizer, start: int, stops: tuple[str, ...]):
        self.tokenizer, self.start, self.stops = tokenizer, start, stops

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.start:], skip_special_tokens=True)
        return torch.tensor([any(stop in text.lstrip() for stop in self.stops) for text in texts],
                            device=input_ids.device)


def shared_prefix(model, encoded: list[list[int]]) -> tuple[list[int], object]:
    """The tokens every row of ``encoded`` begins with (all but each row's last token at most, so every row keeps
    one to decode from) and the KV cache of ``model``'s backbone on them (None without a shared token, or for a
    model that is not a torch module: such a model gets whole prompts)."""
    if not encoded or not isinstance(model, torch.nn.Module):
        return [], None
    n = min(len(row) for row in encoded) - 1
    first = encoded[0]
    for row in encoded[1:]:
        n = next((i for i in range(n) if row[i] != first[i]), n)
    if n < 1:
        return [], None
    backbone = getattr(model, "backbone", model)  # mixed models and kNN-LM wrap it; the cache is the backbone's
    ids = torch.tensor([first[:n]], device=model_device(model))
    return first[:n], backbone(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values


def _batch(rests: list[list[int]], prefix: list[int], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``prefix + padding + rest`` (the rests left-padded to one width) and their attention mask."""
    width = max(len(r) for r in rests)
    ids = [prefix + [pad_id] * (width - len(r)) + r for r in rests]
    mask = [[1] * len(prefix) + [0] * (width - len(r)) + [1] * len(r) for r in rests]
    return torch.tensor(ids, device=device), torch.tensor(mask, device=device)


def end_of_text_ids(model, tokenizer) -> list[int]:
    """Token ids that end an answer: the tokenizer's EOS, the model's generation EOS and the document
    separator the corpus put between documents (which a model fine-tuned on the corpus learns to emit)."""
    ids = {tokenizer.eos_token_id, doc_start_token(tokenizer)}
    base = getattr(model, "backbone", model)  # mixed models and kNN-LM decoders wrap the backbone
    gen = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
    ids.update(gen if isinstance(gen, (list, tuple)) else [gen])
    return sorted(i for i in ids if i is not None)


def _until(row: list[int], end_ids: list[int]) -> list[int]:
    """``row`` up to (not including) its first end-of-text id."""
    for n, token in enumerate(row):
        if token in end_ids:
            return row[:n]
    return row


def evaluate_questions(model, tokenizer, questions: list[dict], prompt_fn=closed_book_prompts,
                       cfg: GenerationConfig | None = None, progress: bool = False) -> dict:
    """EM / F1 (percent) of ``model`` on ``questions`` ``[{"question", "answers", ...}]`` plus the predictions."""
    t0 = time.perf_counter()
    prompts = prompt_fn(questions)
    stops = CLOZE_STOPS if questions and all(q.get("cloze") for q in questions) else STOP_STRINGS
    predictions = generate_answers(model, tokenizer, prompts, cfg, stops, progress)
    result = score(predictions, [q["answers"] for q in questions])
    result["seconds"] = time.perf_counter() - t0
    result["predictions"] = [{"id": q.get("id", str(i)), "prediction": p, "answers": q["answers"]}
                             for i, (q, p) in enumerate(zip(questions, predictions))]
    return result


def tune_lambda(make_model, tokenizer, questions: list[dict], grid: list[float], prompt_fn=closed_book_prompts,
                cfg: GenerationConfig | None = None, progress: bool = False,
                key: str = "lambda", rule: Literal["best", "one_se"] = "best",
                prefer: Literal["smaller", "larger"] = "smaller") -> tuple[float, list[dict]]:
    """The value of ``grid`` chosen on validation F1 and the curve (rows ``{key: value, "em", "f1", "f1_se"}``,
    ``f1_se`` the standard error of the mean F1 over the questions).

    ``rule``: ``best``, the highest F1 (then EM; ties to the preferred value); ``one_se``, the preferred value
    (``prefer``: the smallest or the largest) whose F1 is within one standard error of the best's (the
    one-standard-error rule: the most of what ``prefer`` favours that the validation questions cannot tell from the
    best). ``make_model(value)`` returns a model mixed with weight ``value`` (or set by another one-number knob, e.g.
    the gate's offset or floor).
    """
    curve = []
    for value in sorted(grid):
        r = evaluate_questions(make_model(value), tokenizer, questions, prompt_fn, cfg, progress)
        per = qa_per_item(r["predictions"])["f1"]
        se = 100 * statistics.stdev(per) / math.sqrt(len(per)) if len(per) > 1 else 0.0
        curve.append({key: value, "em": r["em"], "f1": r["f1"], "f1_se": se})
    sign = -1 if prefer == "smaller" else 1
    best = max(curve, key=lambda row: (round(row["f1"], 6), round(row["em"], 6), sign * row[key]))
    if rule == "one_se":
        near = [row for row in curve if row["f1"] >= best["f1"] - best["f1_se"] - 1e-9]
        best = near[0] if prefer == "smaller" else near[-1]
    return best[key], curve


def read_questions(path) -> list[dict]:
    """A JSONL file of ``{"question": ..., "answers": [...]}`` (optionally ``"id"``; ``"answer"`` as a string)."""
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        answers = row.get("answers", row.get("answer"))
        if not isinstance(row.get("question"), str) or answers is None:
            raise CorpusError(f"{path}:{n} needs a string 'question' and 'answers'")
        row["answers"] = [answers] if isinstance(answers, str) else list(answers)
        row.setdefault("id", str(n))
        rows.append(row)
    if not rows:
        raise CorpusError(f"{path} holds no questions")
    return rows


def method_model(method: str, backbone, tokenizer, run_dir=None, corpus=None, lam=None, lora_params=None,
                 progress=True, shots: int = 0):
    """``(model, prompt_fn, info)`` of ``python -m studies qa eval``: one method of
    :data:`~mlpmem.baselines.methods.METHODS` from a finished memory run folder and/or a corpus JSONL (λ: ``lam``
    or the run's perplexity-tuned value; LoRA rank matched to the run's memory unless ``lora_params``). Prompts
    carry ``shots`` demonstrations."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}")
    spec = METHODS[method]
    if spec.needs_run and run_dir is None:
        raise ConfigError(f"method {method} needs --run (a finished memory run folder)")
    if spec.needs_docs and corpus is None:
        raise ConfigError(f"method {method} needs --corpus (a JSONL of documents with 'text')")
    if method == "lora" and lora_params is None and run_dir is None:
        raise ConfigError("method lora needs --run (to match its memory's parameters) or --lora-params")
    docs = None if corpus is None else [{"text": d.text} for d in read_documents(corpus)]
    options = MethodOptions(lam=lam, docs=docs, shots=shots, lora_params=lora_params, progress=progress)
    built = build_method(method, run_dir, (backbone, tokenizer), options)
    return built.model, built.prompts, built.info
