import numpy as np
import torch

from mlpmem.inference.perplexity import lambda_curve, perplexity, tokens_for_mass


def test_tokens_for_mass_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.97, 0.01, 0.01, 0.01], [0.25, 0.25, 0.25, 0.25]])
    assert tokens_for_mass(p, 0.8).tolist() == [2, 1, 4]
    assert tokens_for_mass(p, 0.99).tolist() == [3, 3, 4]


def test_lambda_curve_ends_are_the_two_models():
    rng = np.random.default_rng(0)
    a, b = np.log(rng.uniform(0.01, 1, 50)), np.log(rng.uniform(0.01, 1, 50))
    curve = lambda_curve(a, b, [0.0, 0.5, 1.0])
    assert curve[0.0] == perplexity(a) and curve[1.0] == perplexity(b)
    assert min(curve[0.0], curve[1.0]) * 0.5 < curve[0.5] <= max(curve[0.0], curve[1.0])


def test_perplexity_is_token_weighted():
    assert np.isclose(perplexity(np.log([0.5, 0.5, 0.25, 0.25])), np.exp(-np.mean(np.log([0.5, 0.5, 0.25, 0.25]))))
