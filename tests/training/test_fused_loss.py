"""fused_head_loss against the closed-form reference loss (``helpers.reference_loss.closed_form_loss``) applied to
the materialised logits hidden @ weight.T (+ bias).

Tolerances: in fp32 the loss, its parts and every gradient agree to 1e-5 relative (absolute 1e-5 of the
reference's largest entry); in bf16 (bf16 inputs, logits and logit gradient, fp32 softmax and accumulation)
to 3e-2 relative (absolute 3e-2 of the largest entry) against the same fp32 reference.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.reference_loss import closed_form_loss, dense_reference_loss
from mlpmem.errors import ConfigError
from mlpmem.training.loss import fused_head_loss, release_workspace, sparse_hybrid_loss

N, V, D, K = 37, 101, 16, 8
FP32, BF16 = 1e-5, 3e-2


def sparse_teacher(n: int, vocab: int, k: int, g: torch.Generator):
    """A stored top-K teacher (int32 ids, fp16 probs, fp32 residual) with every awkward row kind.

    Rows 0-3: pads in random slots (row 1 also holds token 0 as a real id); rows 4-5: all pads, residual 1;
    rows 6-8: the support fits in K, residual 0; the rest: support larger than K, residual > 0.
    """
    ids = torch.stack([torch.randperm(vocab, generator=g)[:k] for _ in range(n)])  # (n, k), unique per row
    ids[1] = torch.cat([torch.zeros(1, dtype=torch.long), torch.randperm(vocab - 1, generator=g)[: k - 1] + 1])
    probs = torch.rand(n, k, generator=g) ** 2 + 1e-3  # (n, k)
    pads = torch.zeros(n, k, dtype=torch.bool)
    pads[0, [0, 3]] = pads[1, [2, 5]] = pads[2, -1] = pads[3, 1:] = True
    pads[4:6] = True
    ids, probs = torch.where(pads, -1, ids), torch.where(pads, 0.0, probs)
    mass = torch.full((n, 1), 0.8)  # top-K share of the teacher's mass
    mass[4:6], mass[6:9] = 0.0, 1.0
    probs = probs / probs.sum(-1, keepdim=True).clamp(min=1e-9) * mass
    probs = probs.half()
    residual = (1.0 - probs.float().sum(-1)).clamp(min=0.0)
    residual[6:9] = 0.0
    return ids.int(), probs, residual


def make_case(seed: int = 0, bias: bool = False, n: int = N, vocab: int = V, k: int = K):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, D, generator=g)
    weight = torch.randn(vocab, D, generator=g) * 0.6
    b = torch.randn(vocab, generator=g) * 0.5 if bias else None
    ids, probs, residual = sparse_teacher(n, vocab, k, g)
    targets = torch.randint(0, vocab, (n,), generator=g)
    targets[:5] = ids[:5, 1].clamp(min=0).long()  # some targets inside the top-K, the rest mostly outside
    return hidden, weight, b, ids, probs, residual, targets


def leaves(hidden, weight, bias, tied: bool):
    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(not tied)
    b = None if bias is None else bias.clone().requires_grad_(True)
    return h, w, b


def reference(case, alpha: float, tied: bool):
    """The closed-form reference loss on the fp32 logits, and the gradients of hidden, weight, bias."""
    hidden, weight, bias, ids, probs, residual, targets = case
    h, w, b = leaves(hidden, weight, bias, tied)
    loss, parts = closed_form_loss(F.linear(h, w, b), ids, probs, residual, targets, alpha)
    loss.backward()
    return loss, parts, h.grad, w.grad, None if b is None else b.grad


def fused(case, alpha: float, tied: bool, chunk: int, dtype=torch.float32):
    hidden, weight, bias, ids, probs, residual, targets = case
    h, w, b = leaves(hidden, weight, bias, tied)
    loss, parts = fused_head_loss(h, w, b, ids, probs, residual, targets, alpha, chunk_size=chunk,
                                  compute_dtype=dtype, weight_requires_grad=not tied)
    loss.backward()
    return loss, parts, h.grad, w.grad, None if b is None else b.grad


def assert_close(actual, expected, rel: float) -> None:
    if expected is None:
        assert actual is None
        return
    scale = expected.detach().abs().max().item()
    torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rel, atol=rel * max(scale, 1e-12))


def assert_matches(got, ref, rel: float) -> None:
    loss, parts, *grads = got
    ref_loss, ref_parts, *ref_grads = ref
    assert_close(loss, ref_loss, rel)
    for key in ("loss", "kl", "ce"):
        assert_close(parts[key], ref_parts[key], rel)
        assert not parts[key].requires_grad
    for grad, ref_grad in zip(grads, ref_grads):
        assert_close(grad, ref_grad, rel)


def test_case_covers_the_awkward_rows():
    hidden, weight, bias, ids, probs, residual, targets = make_case()
    in_top = (ids.long() == targets[:, None]).any(-1)
    assert in_top.any() and (~in_top).sum() > N // 2  # targets inside and outside the top-K
    assert (ids == -1).any() and (ids == -1).all(-1).any() and (residual > 0.1).any() and (residual == 0).any()


@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("chunk", [5, 16, 37, 1000])
def test_fp32_equals_closed_form_reference(alpha, tied, chunk):
    case = make_case(seed=1)
    got = fused(case, alpha, tied, chunk)
    assert_matches(got, reference(case, alpha, tied), FP32)
    assert (got[3] is None) == tied  # a frozen (tied) head gets no gradient


@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_fp32_bias_gradient(alpha):
    case = make_case(seed=2, bias=True)
    assert_matches(fused(case, alpha, tied=False, chunk=10), reference(case, alpha, tied=False), FP32)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_bf16_close_to_fp32_reference(tied, alpha):
    case = make_case(seed=3)
    got = fused(case, alpha, tied, chunk=11, dtype=torch.bfloat16)
    assert got[0].dtype == torch.float32 and got[2].dtype == torch.float32
    assert_matches(got, reference(case, alpha, tied), BF16)


def test_rest_cell_empty_or_underflowing():
    """K covers the vocabulary (rows 6-8: empty rest, yet residual > 0), and a rest cell far below fp32's tiny
    (rows 0-2, sharp logits): the rest term sits at its clamp with no gradient, as in the reference."""
    hidden, weight, bias, ids, probs, residual, targets = make_case(seed=4, n=9, vocab=12, k=12)
    sharp = torch.ones(9, 1)
    sharp[:3] = 40.0
    case = (hidden * sharp, weight, bias, ids, probs, residual + 0.05, targets)
    got = fused(case, 0.4, tied=False, chunk=4)
    assert all(torch.isfinite(t).all() for t in (got[0], got[2], got[3]))
    assert_matches(got, reference(case, 0.4, tied=False), FP32)


def test_tiny_rest_cell_matches_float64():
    """A rest cell of mass ~1e-7 holding r = 0.2 (rho ~ 1e6): the top-K gradient, written without the rho terms
    that cancel there, still matches a float64 reference to fp32 precision."""
    hidden, weight, bias, ids, probs, residual, targets = make_case(seed=4, n=9, vocab=12, k=12)
    rows = slice(0, 6)  # the rows with pads, i.e. a non-empty rest cell
    case = (hidden[rows] * 4, weight, None, ids[rows], probs[rows], residual[rows], targets[rows])
    h, w, _ = leaves(case[0], weight, None, tied=False)
    row, slot = (case[3] >= 0).nonzero(as_tuple=True)
    col = case[3][row, slot].long()
    p_dense, in_top = torch.zeros(6, 12, dtype=torch.float64), torch.zeros(6, 12, dtype=torch.bool)
    p_dense[row, col], in_top[row, col] = case[4][row, slot].double(), True
    p_dense += ~in_top * (case[5].double() / (~in_top).sum(-1))[:, None]  # the residual spread over the rest cell
    ref_loss, ref_parts = dense_reference_loss(F.linear(h.double(), w.double()), p_dense, case[6], 0.4, case[3])
    ref_loss.backward()
    got = fused(case, 0.4, tied=False, chunk=4)
    assert_matches(got, (ref_loss.float(), {k: v.float() for k, v in ref_parts.items()}, h.grad, w.grad, None),
                   FP32)


def test_backward_scales_by_the_incoming_gradient():
    hidden, weight, bias, ids, probs, residual, targets = case = make_case(seed=5)
    _, _, ref_h, ref_w, _ = fused(case, 0.4, tied=False, chunk=8)
    h, w, _ = leaves(hidden, weight, None, tied=False)
    loss, _ = fused_head_loss(h, w, None, ids, probs, residual, targets, 0.4, chunk_size=8)
    (loss * 2.5).backward()
    assert_close(h.grad, 2.5 * ref_h, FP32)
    assert_close(w.grad, 2.5 * ref_w, FP32)


def test_weight_requires_grad_false_skips_a_trainable_weight():
    hidden, weight, bias, ids, probs, residual, targets = make_case(seed=6)
    h, w, _ = leaves(hidden, weight, None, tied=False)
    loss, _ = fused_head_loss(h, w, None, ids, probs, residual, targets, 0.4, weight_requires_grad=False)
    loss.backward()
    assert w.grad is None and h.grad is not None


def test_no_grad_gives_the_loss_only():
    case = make_case(seed=7)
    hidden, weight, bias, ids, probs, residual, targets = case
    with torch.no_grad():
        loss, parts = fused_head_loss(hidden, weight, None, ids, probs, residual, targets, 0.4, chunk_size=6)
    assert not loss.requires_grad
    assert_close(loss, reference(case, 0.4, tied=True)[0], FP32)


def test_workspace_survives_other_shapes_and_release():
    """The buffers kept between calls never leak one call's values into the next, whatever the shapes."""
    small, large = make_case(seed=9, n=9, vocab=12, k=12), make_case(seed=10)
    for case, chunk in ((large, 37), (small, 4), (large, 6)):
        assert_matches(fused(case, 0.4, False, chunk, torch.bfloat16), reference(case, 0.4, False), BF16)
        assert_matches(fused(case, 0.4, False, chunk), reference(case, 0.4, False), FP32)
    release_workspace()
    assert_matches(fused(small, 0.4, False, 5), reference(small, 0.4, False), FP32)


def test_bad_inputs_raise_config_errors():
    hidden, weight, bias, ids, probs, residual, targets = make_case(seed=8)
    args = (ids, probs, residual, targets, 0.4)
    with pytest.raises(ConfigError, match="chunk_size"):
        fused_head_loss(hidden, weight, None, *args, chunk_size=0)
    with pytest.raises(ConfigError, match="compute_dtype"):
        fused_head_loss(hidden, weight, None, *args, compute_dtype=torch.float16)
    with pytest.raises(ConfigError, match="weight"):
        fused_head_loss(hidden, weight[:, :-1], None, *args)
    with pytest.raises(ConfigError, match="bias"):
        fused_head_loss(hidden, weight, torch.zeros(V - 1), *args)
    with pytest.raises(ConfigError, match="targets"):
        fused_head_loss(hidden, weight, None, ids, probs, residual, targets[:-1], 0.4)
    with pytest.raises(ConfigError, match="alpha"):
        fused_head_loss(hidden, weight, None, ids, probs, residual, targets, 1.5)


@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_logits_entry_equals_the_head_entry(alpha):
    """sparse_hybrid_loss on the materialised logits: the same pass as fused_head_loss, and the logits' gradient
    chains to the head's."""
    case = make_case(seed=11, bias=True)
    hidden, weight, bias, ids, probs, residual, targets = case
    h, w, b = leaves(hidden, weight, bias, tied=False)
    loss, parts = sparse_hybrid_loss(F.linear(h, w, b), ids, probs, residual, targets, alpha, chunk_size=7)
    loss.backward()
    assert_matches((loss, parts, h.grad, w.grad, b.grad), fused(case, alpha, tied=False, chunk=10), FP32)
