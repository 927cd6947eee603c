import numpy as np
import torch

from mlpmem.inference.perplexity import lambda_curve, perplexity, tokens_for_mass, tokens_for_masses


def test_tokens_for_mass_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.97, 0.01, 0.01, 0.01], [0.25, 0.25, 0.25, 0.25]])
    assert tokens_for_mass(p, 0.8).tolist() == [2, 1, 4]
    assert tokens_for_mass(p, 0.99).tolist() == [3, 3, 4]


def test_tokens_for_masses_equal_a_full_sort(monkeypatch):
    import mlpmem.inference.perplexity as perplexity_module

    def by_full_sort(p, fraction):
        return (torch.cumsum(torch.sort(p, dim=1, descending=True).values, dim=1) < fraction - 1e-9).sum(1) + 1

    torch.manual_seed(0)
    sharp = torch.softmax(torch.randn(40, 3000) * 4, -1)  # candidates reach both fractions
    flat = torch.softmax(torch.randn(40, 3000) * 0.1, -1)  # rows sorted in full
    probs = torch.cat([sharp, flat])[torch.randperm(80)]
    monkeypatch.setattr(perplexity_module, "MASS_CANDIDATES", 64)
    counts = tokens_for_masses(probs, (0.8, 0.99))
    assert torch.equal(counts[0], by_full_sort(probs, 0.8)) and torch.equal(counts[1], by_full_sort(probs, 0.99))
    assert (counts[1] > 64).any() and (counts[0] <= 64).any()  # both paths were taken
    assert torch.equal(tokens_for_mass(probs, 0.8), counts[0])


def test_lambda_curve_ends_are_the_two_models():
    rng = np.random.default_rng(0)
    a, b = np.log(rng.uniform(0.01, 1, 50)), np.log(rng.uniform(0.01, 1, 50))
    curve = lambda_curve(a, b, [0.0, 0.5, 1.0])
    assert curve[0.0] == perplexity(a) and curve[1.0] == perplexity(b)
    assert min(curve[0.0], curve[1.0]) * 0.5 < curve[0.5] <= max(curve[0.0], curve[1.0])


def test_perplexity_is_token_weighted():
    assert np.isclose(perplexity(np.log([0.5, 0.5, 0.25, 0.25])), np.exp(-np.mean(np.log([0.5, 0.5, 0.25, 0.25]))))
