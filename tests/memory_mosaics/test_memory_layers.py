"""Memory Mosaics v2 math: masks, reparameterisations, causality, fast == reference, first position."""

from __future__ import annotations

import math

import pytest
import torch

from memory_mosaics.config import MosaicsConfig
from memory_mosaics.memory_layers import (
    AssociativeMemory,
    alpha_param,
    bandwidth,
    beta_param,
    gated_keys,
    gated_keys_reference,
    long_term_mask,
    retrieve,
    retrieve_reference,
    short_term_mask,
    successor_values,
    value_scale_param,
)

DOCS = torch.tensor([[0] * 7 + [1] * 6, [5] * 13])  # (B=2, T=13): a boundary at 7 in the first row


def _allowed_set(mask, b, t):
    return set(mask[b, t].nonzero()[:, 0].tolist())


def test_short_term_mask_is_exactly_the_window():
    h = 4
    mask = short_term_mask(DOCS, h)
    for b in range(2):
        for t in range(13):
            expected = {i for i in range(t - h + 1, t) if i >= 0 and DOCS[b, i] == DOCS[b, t]}
            assert _allowed_set(mask, b, t) == expected


def test_long_term_mask_excludes_the_last_m_positions():
    m = 3
    mask = long_term_mask(DOCS, m)
    for b in range(2):
        for t in range(13):
            expected = {i for i in range(0, t - m + 1) if DOCS[b, i] == DOCS[b, t]}
            assert _allowed_set(mask, b, t) == expected
    assert _allowed_set(mask, 1, 12) == set(range(10))
    assert _allowed_set(mask, 0, 9) == set()  # document 1 starts at 7: no pair is m = 3 back yet


def test_reparameterisations_stay_in_range():
    theta = torch.tensor([-1e4, -20.0, -1.0, 0.0, 0.3, 1.5, 9.0, 20.0, 1e4])
    beta = beta_param(theta)
    assert (beta >= 0).all() and (beta <= math.exp(10) + 1e-3).all() and torch.isfinite(beta).all()
    assert (beta[theta > -80] > 0).all()  # strictly positive until exp underflows float32
    alpha = alpha_param(theta)
    assert (alpha >= 0).all() and (alpha <= 1).all()
    scale = value_scale_param(theta)
    assert (scale >= 1).all() and (scale <= math.exp(15) * 1.0001).all()
    assert beta_param(torch.tensor(1.5)).item() == pytest.approx(math.exp(1.5))
    assert alpha_param(torch.tensor(1 / 3)).item() == pytest.approx(1 / 3)


def test_bandwidth_grows_with_n_and_starts_at_beta0():
    n = torch.arange(0, 5000, 7)[None]  # (1, T)
    beta0, beta1, alpha = beta_param(torch.tensor([1.5, -3.0])), beta_param(torch.tensor([1.5, 2.0])), \
        alpha_param(torch.tensor([1 / 3, 0.9]))
    beta = bandwidth(n, beta0, beta1, alpha)  # (1, H, T)
    assert torch.allclose(beta[0, :, 0], beta0)  # n = 0: beta0
    assert (beta[0, :, 1:] >= beta[0, :, :-1]).all() and (beta >= beta0[None, :, None]).all()
    assert beta[0, 0, 1].item() == pytest.approx(math.exp(1.5) * 7 ** (1 / 3) + math.exp(1.5), rel=1e-5)


def test_initialisation_follows_the_paper():
    mem = AssociativeMemory(MosaicsConfig(hidden_size=16, num_attention_heads=4))
    mem.reset_memory_parameters()
    assert torch.allclose(beta_param(mem.beta0_theta), torch.full((4,), math.exp(1.5)))
    assert torch.allclose(alpha_param(mem.alpha_theta), torch.full((4,), 1 / 3))
    assert torch.allclose(value_scale_param(mem.value_scale_theta), torch.ones(4))
    assert ((mem.gamma > 0) & (mem.gamma < 1)).all()


@pytest.mark.parametrize("chunk", [1, 4, 5, 32])
def test_fast_keys_equal_reference(chunk):
    torch.manual_seed(1)
    B, H, T, D = 2, 3, 13, 4
    k_tilde = torch.randn(B, H, T, D, dtype=torch.float64)
    log_g = torch.randn(B, H, T, dtype=torch.float64)
    log_lam = -torch.rand(B, H, T, dtype=torch.float64) * 3
    ref = gated_keys_reference(k_tilde, log_g, log_lam, DOCS)
    assert torch.allclose(gated_keys(k_tilde, log_g, log_lam, DOCS, chunk), ref, atol=1e-10)


def test_fast_keys_stay_finite_where_the_gate_overflows():
    torch.manual_seed(2)
    B, H, T, D = 2, 2, 13, 4
    k_tilde = torch.randn(B, H, T, D)
    log_g = torch.randn(B, H, T).abs() * 60 + 90  # exp(89+) overflows float32
    log_lam = -torch.rand(B, H, T) * 5
    fast = gated_keys(k_tilde, log_g, log_lam, DOCS, 4)
    assert torch.isfinite(fast).all()
    ref = gated_keys_reference(k_tilde.double(), log_g.double(), log_lam.double(), DOCS)
    assert torch.allclose(fast.double(), ref, atol=1e-4)


def test_keys_reset_at_document_starts():
    k_tilde = torch.randn(1, 1, 6, 3)
    doc = torch.tensor([[0, 0, 0, 1, 1, 1]])
    keys = gated_keys(k_tilde, torch.zeros(1, 1, 6), torch.zeros(1, 1, 6), doc, 4)  # g = lam = 1: running sums
    assert torch.allclose(keys[0, 0, 3], torch.nn.functional.normalize(k_tilde[0, 0, 3], dim=-1), atol=1e-6)
    assert torch.allclose(keys[0, 0, 5], torch.nn.functional.normalize(k_tilde[0, 0, 3:].sum(0), dim=-1), atol=1e-6)


def test_successor_values_use_only_the_next_input_of_the_same_document():
    torch.manual_seed(3)
    proj = torch.randn(2, 2, 13, 4)
    gamma, scale = torch.tensor([0.3, 0.8]), torch.tensor([1.0, 2.0])
    values = successor_values(proj, DOCS, gamma, scale)
    j = 5
    bumped = proj.clone()
    bumped[:, :, j] += 10.0
    changed = (successor_values(bumped, DOCS, gamma, scale) - values).abs().amax(dim=(1, 3)) > 1e-6  # (B, T)
    assert changed[1].nonzero()[:, 0].tolist() == [j - 1, j]  # v_{j-1} (via x_j) and v_j only
    # the value at the end of document 0 (position 6) does not read the first token of document 1
    first_of_doc1 = proj.clone()
    first_of_doc1[0, :, 7] += 10.0
    diff = (successor_values(first_of_doc1, DOCS, gamma, scale) - values)[0].abs().amax(dim=(0, 2))
    assert diff[6] == 0 and diff[7] > 0
    assert torch.allclose(values.norm(dim=-1), scale[None, :, None].expand(2, 2, 13))


def test_fast_retrieval_equals_reference_and_first_position_is_zero():
    torch.manual_seed(4)
    B, H, T, D = 2, 3, 13, 4
    keys = torch.nn.functional.normalize(torch.randn(B, H, T, D), dim=-1)
    values = torch.randn(B, H, T, D)
    beta = torch.rand(B, H, T) * 5 + 0.5
    for allowed in (short_term_mask(DOCS, 4), long_term_mask(DOCS, 3)):
        fast = retrieve(keys, values, allowed, beta)
        assert torch.allclose(fast, retrieve_reference(keys, values, allowed, beta), atol=1e-5)
        empty = allowed.sum(-1) == 0  # includes t = 0 and the start of document 1
        assert empty[:, 0].all() and empty[0, 7]
        assert (fast[empty[:, None, :].expand(B, H, T)] == 0).all()


def test_memory_layer_fast_equals_reference_and_is_causal():
    torch.manual_seed(5)
    cfg = MosaicsConfig(hidden_size=12, num_attention_heads=3, scan_chunk=4)
    mem = AssociativeMemory(cfg).double()
    x = torch.randn(2, 13, 12, dtype=torch.float64)
    allowed = long_term_mask(DOCS, 2)
    out = mem(x, DOCS, allowed)
    assert torch.allclose(out, mem(x, DOCS, allowed, reference=True), atol=1e-10)
    for j in (0, 4, 9):
        bumped = x.clone()
        bumped[:, j] += 3.0
        diff = (mem(bumped, DOCS, allowed) - out).abs().amax(-1)  # (B, T)
        assert (diff[:, :j] == 0).all()  # nothing before t = j sees x_j


def test_first_position_is_finite_with_gradients():
    cfg = MosaicsConfig(hidden_size=8, num_attention_heads=2)
    mem = AssociativeMemory(cfg)
    x = torch.randn(1, 1, 8, requires_grad=True)  # one token: no pair at all
    out = mem(x, torch.zeros(1, 1, dtype=torch.long), short_term_mask(torch.zeros(1, 1, dtype=torch.long), 4))
    assert (out == 0).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
