"""The MLP Memory training loss: alpha * KL(p_knn || p_mem) + (1 - alpha) * CE(next token).

The kNN teacher p_knn is stored sparse: per position, its top-K tokens ``teacher_ids (N, K)`` (-1 pads),
their probabilities ``teacher_probs (N, K)`` (0 at pads) and ``teacher_residual (N,)`` = 1 - sum(probs),
the mass of every token outside the top-K, whose split among those tokens is unknown.

Residual mass. The KL is taken between the coarse-grained distributions over the partition
{each top-K token} U {"rest" = every other token}:

    KL = sum_j p_j log(p_j / q_j) + r log(r / q_rest),    q = softmax(logits), q_rest = 1 - sum_j q_j,

with 0 log 0 = 0 (pads and r = 0 contribute nothing). It equals the full KL(p_knn || p_mem) whenever the
teacher's support lies within its top-K (r = 0), and otherwise pushes the memory's mass outside the
top-K towards r without inventing how r is split.

Numerics. log q_rest is not computed as log(1 - sum_j q_j): when the top-K holds almost all of q,
1 - sum_j q_j cancels catastrophically (in fp32 it is exactly 0 below ~6e-8) and its log becomes -inf.
Instead q_rest is summed over the rest cell only (the top-K entries of q masked to 0), which is exact to
rounding for any mass. If the rest is empty (K covers the vocabulary) or underflows, log q_rest sits at the
clamp ``log q_rest >= log(tiny)`` and the rest term has a zero (not NaN) gradient. The gradient is written in
closed form (:class:`_SparseRows`), one pass over the (n, V) block.

The mixed-label identity. For a fixed teacher, with the mixed label y = alpha * p_knn + (1 - alpha) * delta(target)
(p_knn coarse-grained as above, r on the rest cell):

    alpha * KL + (1 - alpha) * CE = H(y, q) - alpha * H(p_knn),

where H(y, q) = -sum_c y_c log q_c is the cross-entropy against y over the cells (the target, if
outside the top-K, keeps its own token probability) and H(p_knn) = :func:`teacher_entropy` is constant
in the memory's parameters: the loss is a soft-label cross-entropy and its logit gradient is q - y.

Memory. ``chunk_size`` computes the (N, V) log-softmax in row chunks; under autograd every chunk is
checkpointed (recomputed in backward), so the extra memory is O(chunk_size * V), not O(N * V).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import check_lambda

LOG_TINY = math.log(torch.finfo(torch.float32).tiny)  # floor of log q_rest (about -87.3)


def check_alpha(alpha: float) -> float:
    """alpha as a float in [0, 1], else a one-line ConfigError."""
    return check_lambda(alpha, name="alpha")


def _check_shapes(logits, teacher_ids, teacher_probs, teacher_residual, targets) -> None:
    if logits.ndim != 2:
        raise ConfigError(f"logits must be (N, V), got shape {tuple(logits.shape)}")
    check_teacher_shapes(logits.shape[0], teacher_ids, teacher_probs, teacher_residual, targets)


def check_teacher_shapes(n: int, teacher_ids, teacher_probs, teacher_residual, targets) -> None:
    """The sparse teacher rows and targets of ``n`` positions: ids/probs (n, K), residual and targets (n,)."""
    if teacher_ids.ndim != 2 or teacher_ids.shape[0] != n or teacher_probs.shape != teacher_ids.shape:
        raise ConfigError(
            f"teacher_ids {tuple(teacher_ids.shape)} and teacher_probs {tuple(teacher_probs.shape)} "
            f"must both be (N={n}, K)"
        )
    if tuple(teacher_residual.shape) != (n,) or tuple(targets.shape) != (n,):
        raise ConfigError(
            f"teacher_residual {tuple(teacher_residual.shape)} and targets {tuple(targets.shape)} must be (N={n},)"
        )


class _SparseRows(torch.autograd.Function):
    """Per-row coarse-grained KL (n,) and CE (n,) with a closed-form backward.

    With q = softmax(z), P = sum_j p_j and the rest cell's share rho = r / q_rest (0 where q_rest sits at its
    clamp), the logit gradients are

        dKL/dz = (P + r - rho) q + rho q[top] - p[top]        dCE/dz = q - e_target

    (``x[top]`` scatters onto the top-K ids only), so backward is a single pass over the (n, V) block instead of
    autograd's replay of two logsumexps and a masked fill.
    """

    @staticmethod
    def forward(ctx, logits, teacher_ids, teacher_probs, teacher_residual, targets):
        n, vocab = logits.shape
        log_z = torch.logsumexp(logits, dim=-1)  # (n,)
        q = torch.exp(logits - log_z[:, None])  # (n, V)
        valid = teacher_ids >= 0  # (n, K)
        ids = teacher_ids.clamp(min=0)  # (n, K)
        # top-K membership; pads scatter into a spare column V, so they never clash with a real id
        cols = torch.where(valid, teacher_ids, vocab)  # (n, K)
        in_top = torch.zeros(n, vocab + 1, dtype=torch.bool, device=logits.device)
        in_top = in_top.scatter_(-1, cols, True)[:, :vocab]  # (n, V)
        q_rest = q.masked_fill(in_top, 0.0).sum(-1)  # (n,) summed over the rest only: no cancellation
        log_q_rest_raw = torch.log(q_rest)
        log_q_rest = log_q_rest_raw.clamp(min=LOG_TINY)  # (n,)

        log_q_top = logits.gather(-1, ids) - log_z[:, None]  # (n, K)
        p = torch.where(valid, teacher_probs.float(), 0.0)  # (n, K)
        r = teacher_residual.float().clamp(min=0.0)  # (n,)
        top_terms = torch.where(p > 0, p * (torch.log(p) - log_q_top), 0.0)  # (n, K)
        rest_term = torch.where(r > 0, r * (torch.log(r) - log_q_rest), 0.0)  # (n,)
        kl = top_terms.sum(-1) + rest_term  # (n,)
        ce = log_z - logits.gather(-1, targets[:, None]).squeeze(-1)  # (n,)

        live = (r > 0) & (log_q_rest_raw > LOG_TINY)  # rest cell with a gradient (clamped: none)
        rho = torch.where(live, r / q_rest.clamp(min=torch.finfo(torch.float32).tiny), 0.0)  # (n,)
        r_live = torch.where(live, r, 0.0)
        ctx.save_for_backward(q, ids, valid, p, rho, r_live, targets)
        return kl, ce

    @staticmethod
    def backward(ctx, grad_kl, grad_ce):
        q, ids, valid, p, rho, r_live, targets = ctx.saved_tensors
        gk = grad_kl if grad_kl is not None else torch.zeros_like(rho)  # (n,)
        gc = grad_ce if grad_ce is not None else torch.zeros_like(rho)  # (n,)
        scale = gk * (p.sum(-1) + r_live - rho) + gc  # (n,)
        grad = q * scale[:, None]  # (n, V): the one full pass
        top = gk[:, None] * (rho[:, None] * q.gather(-1, ids) - p)  # (n, K)
        top = torch.where(valid, top, 0.0)  # pads (clamped to id 0) belong to no cell
        grad.scatter_add_(-1, ids, top)
        grad.scatter_add_(-1, targets[:, None], -gc[:, None])
        return grad, None, None, None, None


def _sparse_rows(logits, teacher_ids, teacher_probs, teacher_residual, targets):
    """Per-row coarse-grained KL (n,) and CE (n,) for one chunk of rows (see :class:`_SparseRows`)."""
    return _SparseRows.apply(logits.float(), teacher_ids, teacher_probs, teacher_residual, targets)


def _chunked_rows(fn, tensors: tuple, chunk_size: int | None):
    """Apply ``fn`` to row chunks of ``tensors``; checkpoint each chunk when gradients are needed."""
    n = tensors[0].shape[0]
    if chunk_size is None or chunk_size >= n:
        return fn(*tensors)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ConfigError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    grad = torch.is_grad_enabled() and tensors[0].requires_grad
    parts = []
    for start in range(0, n, chunk_size):
        chunk = tuple(t[start : start + chunk_size] for t in tensors)
        parts.append(checkpoint(fn, *chunk, use_reentrant=False) if grad else fn(*chunk))
    return tuple(torch.cat(column) for column in zip(*parts))


def _combine(kl: torch.Tensor, ce: torch.Tensor, alpha: float):
    """alpha * mean KL + (1 - alpha) * mean CE, and the parts (detached) for logging."""
    kl_mean, ce_mean = kl.mean(), ce.mean()
    if alpha == 0.0:  # exact endpoints: a non-finite unused part never leaks into the loss
        loss = ce_mean
    elif alpha == 1.0:
        loss = kl_mean
    else:
        loss = alpha * kl_mean + (1.0 - alpha) * ce_mean
    return loss, {"loss": loss.detach(), "kl": kl_mean.detach(), "ce": ce_mean.detach()}


def sparse_hybrid_loss(
    logits: torch.Tensor,
    teacher_ids: torch.Tensor,
    teacher_probs: torch.Tensor,
    teacher_residual: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """alpha * KL(p_knn || p_mem) + (1 - alpha) * CE, averaged over the N positions.

    logits (N, V) are the memory's; the sparse teacher p_knn is (teacher_ids, teacher_probs,
    teacher_residual) as in the module docstring (ids unique per row, -1 pads); targets (N,) are the
    true next tokens. Returns ``(loss, {"loss", "kl", "ce"})`` with the parts detached.
    """
    alpha = check_alpha(alpha)
    _check_shapes(logits, teacher_ids, teacher_probs, teacher_residual, targets)
    tensors = (logits, teacher_ids.long(), teacher_probs, teacher_residual, targets.long())
    kl, ce = _chunked_rows(_sparse_rows, tensors, chunk_size)  # (N,), (N,)
    return _combine(kl, ce, alpha)


def teacher_entropy(teacher_probs: torch.Tensor, teacher_residual: torch.Tensor) -> torch.Tensor:
    """Entropy (N,) of the coarse-grained teacher: -sum_j p_j log p_j - r log r (the loss's constant)."""
    p = teacher_probs.float()  # (N, K)
    r = teacher_residual.float().clamp(min=0.0)  # (N,)
    return -(torch.xlogy(p, p).sum(-1) + torch.xlogy(r, r))  # (N,)


def dense_reference_loss(
    logits: torch.Tensor,
    p_dense: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    teacher_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The same loss from a dense teacher p_dense (N, V), written naively in float64 (for tests).

    ``teacher_ids`` (N, K) (-1 pads) defines the partition's top-K cells; None makes every token its own
    cell, i.e. the full KL(p_dense || softmax(logits)).
    """
    alpha = check_alpha(alpha)
    logq = F.log_softmax(logits.double(), dim=-1)  # (N, V)
    p = p_dense.double()  # (N, V)
    if teacher_ids is None:
        in_top = torch.ones_like(p, dtype=torch.bool)  # (N, V)
    else:
        in_top = torch.zeros_like(p, dtype=torch.bool)
        rows, cols = (teacher_ids >= 0).nonzero(as_tuple=True)
        in_top[rows, teacher_ids[rows, cols].long()] = True  # (N, V)
    p_top = torch.where(in_top, p, 0.0)  # (N, V)
    r = torch.where(in_top, 0.0, p).sum(-1)  # (N,)
    q_rest = torch.where(in_top, 0.0, logq.exp()).sum(-1)  # (N,)
    top = torch.where(p_top > 0, p_top * (torch.log(p_top) - logq), 0.0).sum(-1)  # (N,)
    rest = torch.where(r > 0, r * (torch.log(r) - torch.log(q_rest)), 0.0)  # (N,)
    ce = -logq.gather(-1, targets.long()[:, None]).squeeze(-1)  # (N,)
    return _combine(top + rest, ce, alpha)
