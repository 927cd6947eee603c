"""Multiple choice: log-likelihood scoring, and domain-conditional PMI picking the right answer on a built case."""

import math

import pytest
import torch
from torch import nn

from mlpmem.evaluation.choice import (
    DOMAIN_PREMISE,
    continuation_logprobs,
    score_multiple_choice,
)


class CharTokenizer:
    """One token per character (ASCII codes)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


class PriorModel(nn.Module):
    """Next-token log-probs set by hand: after ' ', 'x' has prior 0.6 and 'y' 0.1, but in a context holding '?'
    (a question) 'x' gets 0.5 and 'y' 0.3; after ':' a space is almost certain. Everything else uniform."""

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        probs = torch.full((B, T, 128), 1 / 128)
        for b in range(B):
            seen_q = False
            for t in range(T):
                tok = int(input_ids[b, t])
                seen_q |= tok == ord("?")
                if tok == ord(":"):
                    set_probs(probs[b, t], {ord(" "): 0.99})
                elif tok == ord(" "):
                    px, py = (0.5, 0.3) if seen_q else (0.6, 0.1)
                    set_probs(probs[b, t], {ord("x"): px, ord("y"): py})
        return type("Out", (), {"logits": probs.log()})()


def set_probs(row, fixed):
    """Put the given probabilities and spread the rest evenly (the row sums to 1)."""
    row[:] = (1 - sum(fixed.values())) / (len(row) - len(fixed))
    for tok, p in fixed.items():
        row[tok] = p


def test_continuation_logprobs_sum_over_tokens():
    lp = continuation_logprobs(PriorModel(), CharTokenizer(), [("Why?:", " y"), (DOMAIN_PREMISE, " y")])
    assert lp[0] == pytest.approx(math.log(0.99) + math.log(0.3), rel=1e-5)
    assert lp[1] == pytest.approx(math.log(0.99) + math.log(0.1), rel=1e-5)


def test_pmi_picks_the_answer_that_the_question_raises():
    items = [{"question": "Which letter?", "choices": ["x", "y"], "label": 1}]
    out = score_multiple_choice(PriorModel(), CharTokenizer(), items, batch_size=1)
    assert out["acc_ll"] == 0.0  # likelihood prefers the a-priori frequent x (0.5 > 0.3)
    assert out["acc_pmi"] == 100.0  # PMI: log(0.3 / 0.1) > log(0.5 / 0.6)
    assert out["n"] == 1


def test_batched_scores_equal_unbatched(tiny_llama, tiny_tokenizer):
    pairs = [("The keeper", " walked"), ("The old lighthouse keeper walked", " along the shore"), ("He", " counted")]
    one = [continuation_logprobs(tiny_llama, tiny_tokenizer, [p])[0] for p in pairs]
    many = continuation_logprobs(tiny_llama, tiny_tokenizer, pairs, batch_size=3)
    assert many == pytest.approx(one, abs=1e-4)


@pytest.mark.parametrize("mixed", [False, True])
def test_shared_contexts_give_the_full_sequences_sums(tiny_run, mixed):
    """A context shared by several choices runs once on a KV cache: the same sums as every pair in full, for the
    backbone and the memory-augmented model (the update study's scorer)."""
    from mlpmem.pipeline.hf_export import augmented_from_run

    model = augmented_from_run(tiny_run, lam=0.5)
    tokenizer = model.tokenizer
    model = model if mixed else model.backbone
    pairs = [("Question: Where was Ann born?\nAnswer:", option) for option in (" Paris", " Oslo", " New York")]
    pairs += [(DOMAIN_PREMISE, " Paris"), (DOMAIN_PREMISE, " Lima"), ("The keeper", " walked")]
    full = continuation_logprobs(model, tokenizer, pairs, batch_size=2)
    shared = continuation_logprobs(model, tokenizer, pairs, batch_size=2, share_context=True)
    assert shared == pytest.approx(full, rel=1e-5, abs=1e-4) and len(set(full)) == len(full)
