"""The MLP Memory training loss, alpha * KL(p_knn || p_mem) + (1 - alpha) * CE(next token), as one chunked pass.

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
Instead q_rest is summed over the rest cell only (the chunk's probabilities at the top-K ids are set aside,
zeroed in place, before the row sum), which is exact to rounding for any mass. If the rest is empty (K covers
the vocabulary) or underflows, log q_rest sits at the clamp ``log q_rest >= log(tiny)`` and the rest term has a
zero (not NaN) gradient.

The mixed-label identity. For a fixed teacher, with the mixed label y = alpha * p_knn + (1 - alpha) * delta(target)
(p_knn coarse-grained as above, r on the rest cell):

    alpha * KL + (1 - alpha) * CE = H(y, q) - alpha * H(p_knn),

where H(y, q) = -sum_c y_c log q_c is the cross-entropy against y over the cells and H(p_knn) is constant in the
memory's parameters: the loss is a soft-label cross-entropy and its logit gradient is q - y. With q = softmax(z),
P = sum_j p_j and the rest cell's share rho = r / q_rest (0 where q_rest sits at its clamp) the gradients are

    dKL/dz = (P + r - rho) q + rho q[top] - p[top]        dCE/dz = q - e_target

(``x[top]`` scatters onto the top-K ids only), written in closed form during the forward pass.

One implementation, two entry points. :func:`fused_head_loss` takes the memory's final-normed state and its
vocabulary head and never holds the (N, V) logits; :func:`sparse_hybrid_loss` takes logits the model computed
(the sharded path, where the head runs inside the model). Row chunk by row chunk, in the forward pass, both

1. compute the chunk's logits ``hidden_chunk @ weight.T`` in ``compute_dtype`` (a bf16 matmul if asked), or
   read the chunk of the given logits,
2. upcast them to fp32 for the softmax statistics and the sparse KL / CE terms,
3. write the closed-form logit gradient ``g = (alpha * dKL/dz + (1 - alpha) * dCE/dz) / N`` in fp32 over the
   softmax, then cast it to ``compute_dtype``, and
4. for the head: run both gradient matmuls at once, ``grad_hidden_chunk = g @ W`` and, for a trainable head,
   ``grad_W += g.T @ hidden_chunk`` (accumulated in fp32 across chunks; ``grad_b += g.sum(0)`` likewise); for
   given logits, keep ``g`` as their gradient.

Backward merely scales the kept gradients by the incoming gradient: no autograd replay and no second pass over
the logits. The loss must be differentiated as a scalar (``loss * w`` is fine); double backward is not supported.
Without grad mode, or when nothing requires a gradient, only the loss is computed. The working memory, two fp32
(chunk, V) buffers, one in compute dtype and a few (V, d), is kept between calls (fresh large CPU allocations cost
page faults); :func:`release_workspace` frees it.

Reduction: the mean over all N rows (teacher pads are ``-1`` ids with probability 0, and the exact endpoints
alpha in {0, 1} drop the unused part, so a non-finite unused part never leaks into the loss).

Existing libraries: liger-kernel's ``fused_linear_cross_entropy`` and apple's cut-cross-entropy install as
pure-Python wheels but import triton (absent here; its wheels target CUDA/ROCm GPUs only), so neither runs on
this CPU-only torch, and both handle hard-label CE only, not a sparse top-K teacher with residual mass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import check_lambda

LOG_TINY = math.log(torch.finfo(torch.float32).tiny)  # floor of log q_rest (about -87.3)


def check_alpha(alpha: float) -> float:
    """alpha as a float in [0, 1], else a one-line ConfigError."""
    return check_lambda(alpha, name="alpha")


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


DEFAULT_CHUNK = 1024  # rows per chunk: bounds the (chunk, V) buffers; large, so that grad_W accumulates rarely
TINY = torch.finfo(torch.float32).tiny
_SCRATCH: dict[str, torch.Tensor] = {}  # reusable buffers by name (see _scratch)


@dataclass
class _Teacher:
    """One chunk's sparse teacher, prepared for gathers and scatters (n rows, K slots)."""

    ids: torch.Tensor  # (n, K) long, pads clamped to 0
    valid: torch.Tensor  # (n, K) bool
    p: torch.Tensor  # (n, K) fp32, 0 at pads
    r: torch.Tensor  # (n,) fp32 residual mass, >= 0
    targets: torch.Tensor  # (n, 1) long
    zero_ids: torch.Tensor  # (n, K) long: valid ids, pads redirected onto a valid id of their row
    keep: torch.Tensor  # (n, 1) bool: the row has no valid id, so its "zeroing" scatter writes q back

    @classmethod
    def of(cls, ids: torch.Tensor, probs: torch.Tensor, residual: torch.Tensor, targets: torch.Tensor) -> _Teacher:
        valid = ids >= 0  # (n, K)
        clamped = ids.clamp(min=0)  # (n, K)
        first = valid.to(torch.uint8).argmax(-1, keepdim=True)  # (n, 1) first valid slot (0 if none)
        # every pad points at a valid id of its row, so all writes to a column agree (scatter order is undefined)
        zero_ids = torch.where(valid, clamped, clamped.gather(-1, first))  # (n, K)
        return cls(
            ids=clamped,
            valid=valid,
            p=torch.where(valid, probs.float(), 0.0),
            r=residual.float().clamp(min=0.0),
            targets=targets[:, None],
            zero_ids=zero_ids,
            keep=~valid.any(-1, keepdim=True),
        )


def _check_inputs(hidden, weight, bias, teacher_ids, teacher_probs, teacher_residual, targets) -> None:
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1]:
        raise ConfigError(
            f"hidden must be (N, d) and weight (V, d), got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ConfigError(f"bias must be (V={weight.shape[0]},), got {tuple(bias.shape)}")
    check_teacher_shapes(hidden.shape[0], teacher_ids, teacher_probs, teacher_residual, targets)


def _check_chunk(chunk_size) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ConfigError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return chunk_size


def _part_weights(alpha: float, n: int) -> tuple[float, float]:
    """d loss / d kl_i and d loss / d ce_i: alpha / N and (1 - alpha) / N, the endpoints exact."""
    w_kl = 0.0 if alpha == 0.0 else (1.0 if alpha == 1.0 else alpha)
    return w_kl / n, (1.0 - w_kl) / n


def _combine(kl: torch.Tensor, ce: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, mean KL, mean CE) from the per-row parts (N,); at alpha in {0, 1} exactly the one part used."""
    kl_mean, ce_mean = kl.mean(), ce.mean()
    if alpha == 0.0:
        return ce_mean.clone(), kl_mean, ce_mean
    if alpha == 1.0:
        return kl_mean.clone(), kl_mean, ce_mean
    return alpha * kl_mean + (1.0 - alpha) * ce_mean, kl_mean, ce_mean


def _chunk_stats(z: torch.Tensor, q: torch.Tensor, t: _Teacher) -> dict[str, torch.Tensor]:
    """Per-row KL, CE and softmax statistics of one chunk from its fp32 logits ``z`` (n, V), read only.

    On return ``q`` (n, V) holds softmax(z) off the top-K ids and 0 on them (the rest cell only).
    """
    z_top = z.gather(-1, t.ids)  # (n, K)
    z_tgt = z.gather(-1, t.targets)[:, 0]  # (n,)
    m = z.amax(-1)  # (n,)
    torch.softmax(z, -1, out=q)  # (n, V)
    log_z = m - torch.log(q.amax(-1))  # (n,): q at the max logit is >= 1/V, so its log is exact to rounding
    q_top = torch.where(t.valid, q.gather(-1, t.ids), 0.0)  # (n, K)
    q.scatter_(-1, t.zero_ids, torch.where(t.keep, q.gather(-1, t.zero_ids), 0.0))  # top-K ids set aside
    q_rest = q.sum(-1)  # (n,) over the rest cell only: no cancellation
    log_q_rest_raw = torch.log(q_rest)  # (n,)
    log_q_rest = log_q_rest_raw.clamp(min=LOG_TINY)
    top_terms = torch.where(t.p > 0, t.p * (torch.log(t.p) - (z_top - log_z[:, None])), 0.0)  # (n, K)
    rest_term = torch.where(t.r > 0, t.r * (torch.log(t.r) - log_q_rest), 0.0)  # (n,)
    live = (t.r > 0) & (log_q_rest_raw > LOG_TINY)  # rest cell with a gradient (clamped: none)
    return {
        "kl": top_terms.sum(-1) + rest_term,
        "ce": log_z - z_tgt,
        "q_top": q_top,
        "rho": torch.where(live, t.r / q_rest.clamp(min=TINY), 0.0),  # (n,)
        "r_live": torch.where(live, t.r, 0.0),
    }


def _chunk_grad(q: torch.Tensor, out: torch.Tensor, st: dict, t: _Teacher, gk: float, gc: float) -> torch.Tensor:
    """The chunk's logit gradient (n, V), built in ``q`` in place and cast into ``out`` (which may be ``q``).

    With scale = gk (P + r - rho) + gc, it is q * scale off the top-K, q * scale + gk (rho q - p) on it, and
    -gc more at the target (the module docstring's gradients with gk = alpha/N, gc = (1 - alpha)/N).
    On the top-K the two rho terms cancel exactly, so they are left out there: q (gk (P + r) + gc) - gk p
    keeps its precision when the rest cell is tiny and rho huge.
    """
    base = gk * (t.p.sum(-1) + st["r_live"]) + gc  # (n,)
    q.mul_((base - gk * st["rho"])[:, None])  # (n, V): 0 at the top-K ids
    top = st["q_top"] * base[:, None] - gk * t.p  # (n, K)
    q.scatter_add_(-1, t.ids, torch.where(t.valid, top, 0.0))  # pads add 0
    q.scatter_add_(-1, t.targets, torch.full_like(t.targets, -gc, dtype=q.dtype))
    if out is not q:  # fp32 edits, then one cast: on CPU a mixed-dtype mul or a bf16 scatter is far slower
        out.copy_(q)
    return out


def _scratch(name: str, rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A (rows, cols) buffer kept between calls: a large CPU allocation comes back as fresh pages every time, and
    faulting them in costs about as much as a pass over the data. Grown on demand; see :func:`release_workspace`."""
    buf = _SCRATCH.get(name)
    if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype or buf.device != device:
        buf = _SCRATCH[name] = torch.empty(rows, cols, dtype=dtype, device=device)
    return buf[:rows]


def release_workspace() -> None:
    """Free the buffers :func:`fused_head_loss` keeps between calls (three (chunk, V) and a few (V, d))."""
    _SCRATCH.clear()


@dataclass
class _Work:
    """The forward's state: operands in compute dtype, scratch buffers, per-row parts and gradients."""

    h: torch.Tensor  # (N, d) hidden in compute dtype, or the given logits (N, V)
    w: torch.Tensor | None  # (V, d) weight in compute dtype; None: ``h`` holds the logits
    b: torch.Tensor | None  # (V,) fp32 bias
    z: torch.Tensor  # (chunk, V) fp32 logits
    q: torch.Tensor  # (chunk, V) fp32 softmax, then the fp32 gradient
    low: torch.Tensor | None  # (chunk, V) compute-dtype logits, then gradient (None in fp32)
    kl: torch.Tensor  # (N,)
    ce: torch.Tensor  # (N,)
    grad_h: torch.Tensor | None  # (N, d) in hidden's dtype (the logits' (N, V) when given)
    grad_w: torch.Tensor | None  # (V, d) fp32 accumulator, filled by the first chunk
    grad_b: torch.Tensor | None  # (V,) fp32 accumulator

    @classmethod
    def of(cls, hidden, weight, bias, chunk: int, dtype: torch.dtype, grads: tuple[bool, bool, bool]) -> _Work:
        (n, d), dev = hidden.shape, hidden.device
        vocab = d if weight is None else weight.shape[0]
        rows, f32 = min(chunk, n), {"dtype": torch.float32, "device": dev}
        low = dtype != torch.float32
        if weight is None:
            w = None
        else:
            w = _scratch("w", vocab, d, dtype, dev).copy_(weight.detach()) if low else weight.detach().float()
        return cls(
            h=hidden.detach() if weight is None else hidden.detach().to(dtype),
            w=w,
            b=None if bias is None else bias.detach().float(),
            z=_scratch("z", rows, vocab, torch.float32, dev),
            q=_scratch("q", rows, vocab, torch.float32, dev),
            low=_scratch("low", rows, vocab, dtype, dev) if low else None,
            kl=torch.empty(n, **f32),
            ce=torch.empty(n, **f32),
            grad_h=torch.zeros_like(hidden) if grads[0] else None,
            grad_w=torch.empty(weight.shape, **f32) if grads[1] else None,  # grads[1] False without a weight
            grad_b=torch.zeros(vocab, **f32) if grads[2] else None,
        )

    def chunk(self, start: int, stop: int, t: _Teacher, gk: float, gc: float) -> None:
        """Loss parts and gradient contributions of rows [start, stop)."""
        rows = stop - start
        h, z, q = self.h[start:stop], self.z[:rows], self.q[:rows]  # (n, d), (n, V), (n, V)
        low = None if self.low is None else self.low[:rows]
        if self.w is None:
            z.copy_(h)  # the given logits, upcast
        else:
            torch.mm(h, self.w.t(), out=z if low is None else low)  # (n, V) logits in compute dtype
            if low is not None:
                z.copy_(low)  # upcast
        if self.b is not None:
            z.add_(self.b)
        st = _chunk_stats(z, q, t)
        self.kl[start:stop], self.ce[start:stop] = st["kl"], st["ce"]
        if self.grad_h is None and self.grad_w is None and self.grad_b is None:
            return
        g = _chunk_grad(q, q if low is None else low, st, t, gk, gc)  # (n, V) in compute dtype
        if self.grad_h is not None:
            self.grad_h[start:stop] = g if self.w is None else g @ self.w  # (n, V) or (n, d)
        if self.grad_w is not None:
            self._add_grad_w(g, h, first=start == 0)
        if self.grad_b is not None:
            self.grad_b += g.sum(0, dtype=torch.float32)

    def _add_grad_w(self, g: torch.Tensor, h: torch.Tensor, first: bool) -> None:
        """grad_W (+)= g.T @ h: the product in compute dtype, the sum over chunks in fp32."""
        if g.dtype == torch.float32 and first:
            torch.mm(g.t(), h, out=self.grad_w)  # (V, d)
            return
        if g.dtype == torch.float32:
            self.grad_w.addmm_(g.t(), h)
            return
        prod = torch.mm(g.t(), h, out=_scratch("prod", *self.grad_w.shape, g.dtype, g.device))  # (V, d)
        if first:
            self.grad_w.copy_(prod)
        else:  # cast, then add: a mixed-dtype add_ is several times slower on CPU
            self.grad_w += _scratch("stage", *self.grad_w.shape, torch.float32, g.device).copy_(prod)


class _FusedHeadLoss(torch.autograd.Function):
    """loss, mean KL, mean CE of the head + sparse hybrid loss; all gradients are computed in forward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids, probs, residual, targets, alpha, chunk, dtype, grads):
        n = hidden.shape[0]
        work = _Work.of(hidden, weight, bias, chunk, dtype, grads)
        gk, gc = _part_weights(alpha, n)
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            t = _Teacher.of(ids[start:stop], probs[start:stop], residual[start:stop], targets[start:stop])
            work.chunk(start, stop, t, gk, gc)
        ctx.grads = (work.grad_h, work.grad_w, work.grad_b)
        ctx.dtypes = (hidden.dtype, None if weight is None else weight.dtype, None if bias is None else bias.dtype)
        loss, kl_mean, ce_mean = _combine(work.kl, work.ce, alpha)
        ctx.mark_non_differentiable(kl_mean, ce_mean)
        return loss, kl_mean, ce_mean

    @staticmethod
    def backward(ctx, grad_loss, _grad_kl, _grad_ce):
        scaled = [None if g is None else (g * grad_loss).to(dt) for g, dt in zip(ctx.grads, ctx.dtypes)]
        return (*scaled, None, None, None, None, None, None, None, None)


def fused_head_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    teacher_ids: torch.Tensor,
    teacher_probs: torch.Tensor,
    teacher_residual: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    chunk_size: int = DEFAULT_CHUNK,
    compute_dtype: torch.dtype = torch.float32,
    weight_requires_grad: bool | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``sparse_hybrid_loss(F.linear(hidden, weight, bias), ...)`` without the (N, V) logits (module docstring).

    hidden (N, d) is the memory's final-normed state, weight (V, d) / bias (V,) its head; the teacher and
    targets are as for ``sparse_hybrid_loss``. ``compute_dtype`` (float32 or bfloat16) is the dtype of the
    three matmuls and of the logit gradient; softmax, loss and accumulators are fp32. ``weight_requires_grad``
    (default: ``weight.requires_grad``) False skips grad_W, e.g. for a tied, frozen head. Returns
    ``(loss, {"loss", "kl", "ce"})`` with the parts detached, like ``sparse_hybrid_loss``.
    """
    alpha = check_alpha(alpha)
    chunk = _check_chunk(chunk_size)
    if compute_dtype not in (torch.float32, torch.bfloat16):
        raise ConfigError(f"compute_dtype must be torch.float32 or torch.bfloat16, got {compute_dtype}")
    _check_inputs(hidden, weight, bias, teacher_ids, teacher_probs, teacher_residual, targets)
    train_w = weight.requires_grad if weight_requires_grad is None else bool(weight_requires_grad)
    on = torch.is_grad_enabled()
    grads = (on and hidden.requires_grad, on and train_w and weight.requires_grad,
             on and bias is not None and bias.requires_grad)
    with torch.autocast(hidden.device.type, enabled=False):  # the dtypes are ours to choose
        loss, kl, ce = _FusedHeadLoss.apply(
            hidden, weight, bias, teacher_ids.long(), teacher_probs, teacher_residual, targets.long(),
            alpha, chunk, compute_dtype, grads,
        )
    return loss, {"loss": loss.detach(), "kl": kl, "ce": ce}


def sparse_hybrid_loss(
    logits: torch.Tensor,
    teacher_ids: torch.Tensor,
    teacher_probs: torch.Tensor,
    teacher_residual: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """alpha * KL(p_knn || p_mem) + (1 - alpha) * CE on logits (N, V) the model computed, averaged over N.

    The sparse teacher p_knn is (teacher_ids, teacher_probs, teacher_residual) as in the module docstring (ids
    unique per row, -1 pads); targets (N,) are the true next tokens. The same chunked pass as
    :func:`fused_head_loss`, fp32 whatever the logits' dtype, ``chunk_size`` rows at a time (None: the default).
    Returns ``(loss, {"loss", "kl", "ce"})`` with the parts detached.
    """
    alpha = check_alpha(alpha)
    chunk = DEFAULT_CHUNK if chunk_size is None else _check_chunk(chunk_size)
    if logits.ndim != 2:
        raise ConfigError(f"logits must be (N, V), got shape {tuple(logits.shape)}")
    check_teacher_shapes(logits.shape[0], teacher_ids, teacher_probs, teacher_residual, targets)
    grads = (torch.is_grad_enabled() and logits.requires_grad, False, False)
    with torch.autocast(logits.device.type, enabled=False):
        loss, kl, ce = _FusedHeadLoss.apply(
            logits, None, None, teacher_ids.long(), teacher_probs, teacher_residual, targets.long(),
            alpha, chunk, torch.float32, grads,
        )
    return loss, {"loss": loss.detach(), "kl": kl, "ce": ce}
