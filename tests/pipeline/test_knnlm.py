import math

import pytest
import torch

from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import mix
from mlpmem.inference.perplexity import perplexity
from mlpmem.pipeline.knnlm import (
    EvalSplit,
    KnnLMConfig,
    best,
    knn_target_logprob,
    sweep,
)


def _split(n=40, k=8, vocab=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return EvalSplit(
        lm_logprob=torch.log(torch.rand(n, generator=g, dtype=torch.float64) * 0.5 + 0.1),
        dists=torch.sort(torch.rand(n, k, generator=g, dtype=torch.float64) * 4, 1).values,
        neighbour_tokens=torch.randint(0, vocab, (n, k), generator=g),
        targets=torch.randint(0, vocab, (n,), generator=g),
    )


def test_knn_target_logprob_by_hand():
    d = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    toks = torch.tensor([[4, 2, 4]])
    lp = knn_target_logprob(d, toks, torch.tensor([4]), k=3, temperature=1.0)
    w = torch.softmax(-d[0], 0)
    assert math.isclose(lp.exp().item(), (w[0] + w[2]).item(), rel_tol=1e-12)
    assert knn_target_logprob(d, toks, torch.tensor([3]), 3, 1.0).item() == -math.inf
    assert math.isclose(knn_target_logprob(d, toks, torch.tensor([2]), 1, 1.0).exp().item(), 0.0, abs_tol=0)


def test_lambda_zero_reproduces_backbone_exactly():
    s = _split()
    assert s.ppl(8, 3.0, 0.0) == perplexity(s.lm_logprob)
    rows = sweep(s, KnnLMConfig(k_grid=[2, 8], temperature_grid=[1.0], lambda_grid=[0.0, 0.5]))
    assert all(r["ppl"] == perplexity(s.lm_logprob) for r in rows if r["lambda"] == 0)


def test_mixing_is_exact_at_the_ends_and_normalised():
    la = torch.log_softmax(torch.randn(3, 11, dtype=torch.float64), -1)
    lb = torch.log_softmax(torch.randn(3, 11, dtype=torch.float64), -1)
    assert torch.equal(mix(la, lb, 0.0, logits=False), la) and torch.equal(mix(la, lb, 1.0, logits=False), lb)
    torch.testing.assert_close(torch.logsumexp(mix(la, lb, 0.3, logits=False), -1), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        mix(la, lb, 1.5, logits=False)
    with pytest.raises(ConfigError):
        mix(la, lb, float("nan"), logits=False)


def test_sweep_picks_the_minimum():
    s = _split()
    rows = sweep(s, KnnLMConfig(k_grid=[2, 8], temperature_grid=[0.5, 5.0], lambda_grid=[0.0, 0.2, 0.9]))
    assert len(rows) == 12
    chosen = best(rows)
    assert chosen["ppl"] == min(r["ppl"] for r in rows)


def test_config_validation():
    with pytest.raises(ConfigError):
        KnnLMConfig(lambda_grid=[0.1, -0.2])
    with pytest.raises(ConfigError):
        KnnLMConfig(temperature_grid=[0.0])
