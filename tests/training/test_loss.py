"""The sparse hybrid loss alpha * KL(p_knn || p_mem) + (1 - alpha) * CE against dense references.

Each identity is checked for the library's chunked pass (``sparse_hybrid_loss``) and for the closed-form
reference (``helpers.reference_loss.closed_form_loss``) the fused head loss is checked against.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.reference_loss import closed_form_loss, dense_reference_loss, teacher_entropy
from mlpmem.errors import ConfigError
from mlpmem.training.loss import sparse_hybrid_loss

N, V = 12, 50
LOSSES = pytest.mark.parametrize("loss_fn", [sparse_hybrid_loss, closed_form_loss], ids=["library", "closed_form"])


def dense_teacher(n: int = N, vocab: int = V, support: int = 10, seed: int = 0) -> torch.Tensor:
    """A random p_knn (n, vocab) supported on `support` random tokens per row."""
    g = torch.Generator().manual_seed(seed)
    p = torch.zeros(n, vocab)
    for row in range(n):
        ids = torch.randperm(vocab, generator=g)[:support]
        p[row, ids] = torch.rand(support, generator=g) ** 3 + 1e-3
    return p / p.sum(-1, keepdim=True)


def sparsify(p: torch.Tensor, k: int, pad_rows: int = 4):
    """Top-k of a dense teacher, with the last 2 slots of the first `pad_rows` rows turned into padding."""
    probs, ids = p.topk(k, dim=-1)  # (N, k)
    ids, probs = ids.clone(), probs.clone()
    ids[:pad_rows, -2:] = -1
    probs[:pad_rows, -2:] = 0.0
    probs = torch.where(probs > 0, probs, 0.0)
    ids = torch.where(probs > 0, ids, -1)  # zero-probability slots are padding too
    residual = 1.0 - probs.sum(-1)
    return ids, probs, residual


def random_case(seed: int = 0, k: int = 6):
    g = torch.Generator().manual_seed(seed + 100)
    logits = torch.randn(N, V, generator=g) * 3
    targets = torch.randint(0, V, (N,), generator=g)
    p = dense_teacher(seed=seed)
    return logits, p, targets, *sparsify(p, k)


@LOSSES
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 1.0])
def test_sparse_equals_dense_reference_with_residual_and_padding(loss_fn, alpha):
    logits, p, targets, ids, probs, residual = random_case()
    assert (residual > 0.01).all() and (ids == -1).any()  # K smaller than the support, pads present
    loss, parts = loss_fn(logits, ids, probs, residual, targets, alpha)
    ref, ref_parts = dense_reference_loss(logits, p, targets, alpha, teacher_ids=ids)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(parts["kl"].double(), ref_parts["kl"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(parts["ce"].double(), ref_parts["ce"], rtol=1e-5, atol=1e-5)


@LOSSES
def test_alpha_zero_is_cross_entropy(loss_fn):
    logits, p, targets, ids, probs, residual = random_case(seed=1)
    loss, _ = loss_fn(logits, ids, probs, residual, targets, alpha=0.0)
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets))


@LOSSES
def test_alpha_one_with_support_inside_top_k_is_full_kl(loss_fn):
    logits, p, targets, *_ = random_case(seed=2)
    ids, probs, residual = sparsify(p, k=12, pad_rows=0)  # support 10 <= K = 12: zero slots become pads
    assert residual.abs().max() < 1e-5 and (ids == -1).any()
    loss, _ = loss_fn(logits, ids, probs, residual.clamp(min=0), targets, alpha=1.0)
    full_kl = F.kl_div(F.log_softmax(logits, -1), p, reduction="batchmean")
    torch.testing.assert_close(loss, full_kl, rtol=1e-5, atol=1e-5)
    ref, _ = dense_reference_loss(logits, p, targets, 1.0)  # teacher_ids=None: every token its own cell
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)


@LOSSES
def test_mixed_label_identity_full_support(loss_fn):
    """loss = CE(soft label alpha p + (1 - alpha) delta(target)) - alpha H(p); its logit gradient is q - y."""
    logits, p, targets, *_ = random_case(seed=3)
    ids, probs, residual = sparsify(p, k=12, pad_rows=0)
    residual = residual.clamp(min=0)
    alpha = 0.6
    y = alpha * p + (1 - alpha) * F.one_hot(targets, V).float()  # (N, V)
    logits = logits.requires_grad_()
    loss, _ = loss_fn(logits, ids, probs, residual, targets, alpha)
    expected = F.cross_entropy(logits, y) - alpha * teacher_entropy(probs, residual).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    (grad,) = torch.autograd.grad(loss, logits)
    torch.testing.assert_close(grad, (torch.softmax(logits, -1) - y).detach() / N, rtol=1e-4, atol=1e-6)


@LOSSES
def test_mixed_label_identity_with_residual_cell(loss_fn):
    """With mass outside the top-K, the identity holds over the cells {top-K tokens} U {rest}."""
    logits, p, _, ids, probs, residual = random_case(seed=4)
    targets = ids[:, 0]  # the target is a top-K cell
    alpha = 0.4
    rest = torch.logsumexp(logits.masked_fill(_in_top(ids), float("-inf")), -1)  # (N,)
    cell_logits = torch.cat([torch.where(ids >= 0, logits.gather(-1, ids.clamp(min=0)), -1e9), rest[:, None]], -1)
    cell_p = torch.cat([probs, residual[:, None]], -1)  # (N, K + 1)
    y = alpha * cell_p + (1 - alpha) * F.one_hot(torch.zeros(N, dtype=torch.long), cell_p.shape[1])
    loss, _ = loss_fn(logits, ids, probs, residual, targets, alpha)
    expected = F.cross_entropy(cell_logits, y) - alpha * teacher_entropy(probs, residual).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def _in_top(ids: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(ids.shape[0], V + 1, dtype=torch.bool)
    return mask.scatter_(-1, torch.where(ids >= 0, ids, V), True)[:, :V]


@LOSSES
@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_closed_form_gradient_equals_autograd_of_dense_reference(loss_fn, alpha):
    logits, p, targets, ids, probs, residual = random_case(seed=7)
    ids, probs = ids.clone(), probs.clone()
    ids[0, 0], probs[0, 0] = 0, probs[0, 0]  # token 0 is a real top-K id in a row that also has pads
    p[0] = 0.0
    p[0, ids[0][ids[0] >= 0]] = probs[0][ids[0] >= 0]
    assert not (ids[0] == 1).any()
    p[0, 1] += residual[0]  # the residual lives on a token outside the top-K
    assert (ids[0] == -1).any()
    x = logits.clone().requires_grad_()
    loss, _ = loss_fn(x, ids, probs, residual, targets, alpha)
    loss.backward()
    y = logits.double().requires_grad_()
    ref, _ = dense_reference_loss(y, p, targets, alpha, teacher_ids=ids)
    ref.backward()
    torch.testing.assert_close(x.grad.double(), y.grad, rtol=1e-5, atol=1e-6)


@LOSSES
def test_chunked_equals_unchunked_with_gradients(loss_fn):
    logits, p, targets, ids, probs, residual = random_case(seed=5)
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    loss_a, _ = loss_fn(a, ids, probs, residual, targets, 0.5)
    loss_b, _ = loss_fn(b, ids, probs, residual, targets, 0.5, chunk_size=5)  # 5 + 5 + 2 rows
    torch.testing.assert_close(loss_a, loss_b)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(a.grad, b.grad)
    with torch.no_grad():
        loss_c, _ = loss_fn(logits, ids, probs, residual, targets, 0.5, chunk_size=3)
    torch.testing.assert_close(loss_a.detach(), loss_c)


@LOSSES
def test_gradient_finite_in_extreme_cases(loss_fn):
    logits, p, targets, ids, probs, residual = random_case(seed=6)
    logits = logits * 40  # saturated softmax: the top-K holds all of q's mass in fp32
    logits[0, :] = 0.0
    logits[0, ids[0, 0]] = 200.0
    full_ids = torch.arange(V).repeat(N, 1)  # K = V: the rest cell is empty
    full_probs = torch.softmax(torch.randn(N, V), -1)
    for args in ((ids, probs, residual), (full_ids, full_probs, torch.full((N,), 1e-3))):
        x = logits.clone().requires_grad_()
        loss, parts = loss_fn(x, *args, targets, 0.5, chunk_size=4)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(x.grad).all()


@LOSSES
@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_alpha_out_of_range(loss_fn, alpha):
    logits, p, targets, ids, probs, residual = random_case()
    with pytest.raises(ConfigError, match="alpha"):
        loss_fn(logits, ids, probs, residual, targets, alpha)


@LOSSES
def test_shape_mismatch_is_config_error(loss_fn):
    logits, p, targets, ids, probs, residual = random_case()
    with pytest.raises(ConfigError):
        loss_fn(logits, ids[:-1], probs[:-1], residual, targets, 0.5)
