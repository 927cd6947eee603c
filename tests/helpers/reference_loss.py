"""The references the library's loss (:mod:`mlpmem.training.loss`) is checked against.

``closed_form_loss``: the sparse hybrid loss on logits with autograd's own chunking (each chunk checkpointed) and a
per-row closed-form backward (:class:`_SparseRows`), written independently of the library's fused pass.
``dense_reference_loss``: the same loss from a dense teacher, written naively in float64.
``teacher_entropy``: the loss's constant, for the mixed-label identity.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from mlpmem.training.loss import check_alpha, check_teacher_shapes

LOG_TINY = math.log(torch.finfo(torch.float32).tiny)


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
    return _SparseRows.apply(logits.float(), teacher_ids, teacher_probs, teacher_residual, targets)


def _chunked_rows(fn, tensors: tuple, chunk_size: int | None):
    """Apply ``fn`` to row chunks of ``tensors``; checkpoint each chunk when gradients are needed."""
    n = tensors[0].shape[0]
    if chunk_size is None or chunk_size >= n:
        return fn(*tensors)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    grad = torch.is_grad_enabled() and tensors[0].requires_grad
    parts = []
    for start in range(0, n, chunk_size):
        chunk = tuple(t[start : start + chunk_size] for t in tensors)
        parts.append(checkpoint(fn, *chunk, use_reentrant=False) if grad else fn(*chunk))
    return tuple(torch.cat(column) for column in zip(*parts))


def naive_combine(kl: torch.Tensor, ce: torch.Tensor, alpha: float):
    """alpha * mean KL + (1 - alpha) * mean CE (exact endpoints), and the parts (detached)."""
    kl_mean, ce_mean = kl.mean(), ce.mean()
    loss = ce_mean if alpha == 0.0 else kl_mean if alpha == 1.0 else alpha * kl_mean + (1.0 - alpha) * ce_mean
    return loss, {"loss": loss.detach(), "kl": kl_mean.detach(), "ce": ce_mean.detach()}


def closed_form_loss(logits, teacher_ids, teacher_probs, teacher_residual, targets, alpha: float,
                     chunk_size: int | None = None):
    """alpha * KL(p_knn || p_mem) + (1 - alpha) * CE on logits (N, V), as ``sparse_hybrid_loss``."""
    alpha = check_alpha(alpha)
    if logits.ndim != 2:
        raise ValueError(f"logits must be (N, V), got shape {tuple(logits.shape)}")
    check_teacher_shapes(logits.shape[0], teacher_ids, teacher_probs, teacher_residual, targets)
    tensors = (logits, teacher_ids.long(), teacher_probs, teacher_residual, targets.long())
    kl, ce = _chunked_rows(_sparse_rows, tensors, chunk_size)  # (N,), (N,)
    return naive_combine(kl, ce, alpha)


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
    """The same loss from a dense teacher p_dense (N, V), written naively in float64.

    ``teacher_ids`` (N, K) (-1 pads) defines the partition's top-K cells; None makes every token its own
    cell, i.e. the full KL(p_dense || softmax(logits)).
    """
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
    return naive_combine(top + rest, ce, alpha)
