"""Multiple choice by log-likelihood, and by domain-conditional PMI (Holtzman et al., 2021).

For a question q and a choice c (the tokens of ``" " + c`` after the prompt):

  - log-likelihood:  score(c) = Σ_t log p(c_t | prompt(q), c_<t)
  - domain-conditional PMI:  score(c) = log p(c | prompt(q)) − log p(c | domain premise)
    with the premise ``"Answer:"`` — it removes the prior of a choice that is likely whatever the
    question (short, frequent strings), as the MLP Memory paper does for its nine tasks.

The prediction is the choice with the highest score; accuracy in percent. ``model`` is any causal LM
whose forward returns ``logits`` (the backbone, a fine-tuned copy, or a memory-augmented model, whose
"logits" are mixed log-probabilities — log_softmax leaves them unchanged).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mlpmem.compute import model_device
from mlpmem.evaluation.shared_context import forward_on_cache, shared_context_loglikelihood, shared_groups
from mlpmem.inference.prompts import qa_prompt

DOMAIN_PREMISE = "Answer:"


def continuation_logprobs(model, tokenizer, pairs: list[tuple[str, str]], batch_size: int = 16,
                          progress: bool = False, share_context: bool = False) -> list[float]:
    """Σ log p(continuation | context) for each (context, continuation) pair.

    ``share_context`` (for models that take and return a KV cache, ``cache=``: the backbone, a memory-augmented
    or kNN-LM model): the pairs with one context run it once and their continuations on its cache
    (:mod:`mlpmem.evaluation.shared_context`; the same sums to float rounding); otherwise every pair runs in
    full (right padding, one forward a batch). Every context must hold at least one token.
    """
    encoded = [(None, _ids(tokenizer, context), _ids(tokenizer, continuation)) for context, continuation in pairs]
    if not share_context:
        return _full_sequences(model, encoded, batch_size, progress)

    def forward(ids, past, last_only):
        out = forward_on_cache(model, ids, past, last_only)
        return out.logits, out.cache

    groups, _ = shared_groups(encoded, max_length=None, min_members=1)
    pad_id = tokenizer.pad_token_id if getattr(tokenizer, "pad_token_id", None) is not None else 0
    scored = shared_context_loglikelihood(forward, encoded, groups, batch_size, pad_id, progress)
    return [scored[i][0] for i in range(len(encoded))]


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def _full_sequences(model, encoded: list[tuple], batch_size: int, progress: bool) -> list[float]:
    """Each ``(None, context ids, continuation ids)`` as one right-padded row; Σ log p of its continuation."""
    out = []
    for start in tqdm(range(0, len(encoded), batch_size), desc="score choices", disable=not progress):
        chunk = encoded[start : start + batch_size]
        rows = [ctx + cont for _, ctx, cont in chunk]
        spans = [(len(ctx), len(ctx) + len(cont)) for _, ctx, cont in chunk]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        ids, mask = ids.to(model_device(model)), mask.to(model_device(model))
        logp = F.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)  # (B, T, V)
        for i, (lo, hi) in enumerate(spans):
            targets = ids[i, lo:hi]  # (n,)
            out.append(logp[i, lo - 1 : hi - 1].gather(1, targets[:, None]).sum().item())
    return out


def choice_prompt(question: str) -> str:
    return qa_prompt(question)


def score_multiple_choice(model, tokenizer, items: list[dict], batch_size: int = 16, progress: bool = False) -> dict:
    """Accuracy (percent) by log-likelihood and by domain-conditional PMI over ``[{"question","choices","label"}]``,
    and ``per_item``: each item's id and 1/0 correctness by each rule (for paired intervals)."""
    pairs, premise_pairs = [], []
    for item in items:
        for choice in item["choices"]:
            pairs.append((choice_prompt(item["question"]), " " + choice))
            premise_pairs.append((DOMAIN_PREMISE, " " + choice))
    ll = continuation_logprobs(model, tokenizer, pairs, batch_size, progress)
    prior = continuation_logprobs(model, tokenizer, premise_pairs, batch_size, progress)
    correct: dict[str, list[int]] = {"acc_ll": [], "acc_pmi": []}
    at = 0
    for item in items:
        k = len(item["choices"])
        s_ll = ll[at : at + k]
        s_pmi = [a - b for a, b in zip(s_ll, prior[at : at + k])]
        correct["acc_ll"].append(int(max(range(k), key=s_ll.__getitem__) == item["label"]))
        correct["acc_pmi"].append(int(max(range(k), key=s_pmi.__getitem__) == item["label"]))
        at += k
    n = max(1, len(items))
    per_item = {"ids": [str(item.get("id", i)) for i, item in enumerate(items)], **correct}
    return {"acc_ll": 100 * sum(correct["acc_ll"]) / n, "acc_pmi": 100 * sum(correct["acc_pmi"]) / n,
            "n": len(items), "per_item": per_item}
