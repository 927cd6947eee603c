"""Associative memories of Memory Mosaics v2: gated keys, successor values, kernel-regression retrieval.

Per head, with x_t the (normed) block input:

  keys      k~_t = W_phi x_t,  g_t = exp(W_g x_t),  lam_t = exp(-|W_lam x_t|)   (g, lam scalars)
            kbar_t = g_t k~_t + lam_t kbar_{t-1},    k_t = Norm(kbar_t)          (the key is also the query)
  values    v_t = alpha_psi Norm(gamma W_psi x_t + (1 - gamma) W_psi x_{t+1})
  retrieval out_t = sum_i softmax_i(beta(n_t) k_t . k_i) v_i over the allowed pairs i < t,
            beta(n) = beta1 n^alpha + beta0, n_t = number of allowed pairs of position t.

Norm is the L2 normalisation (keys on the unit sphere, values of norm alpha_psi). Every recurrence and
every retrieval stays inside a document (``doc_ids``): a new document resets kbar, a value never looks at
the first token of the next document, and no pair of another document is allowed.

Each computation has a reference (plain loops, explicit masks) and a fast form, tested equal:
  - keys: a chunked scan. The recurrence unrolls to kbar_t = sum_{s<=t} exp(log g_s + L_t - L_s) k~_s
    with L_t = sum_{r<=t} log lam_r: inside chunks this is one masked matrix product, across chunks the
    chunk-end state is carried. Norm removes any positive factor of a row, so rows are kept as
    exp(m_t) r_t with m_t a running maximum of the exponents: no overflow even where g_t itself would
    overflow float32.
  - retrieval: one ``scaled_dot_product_attention`` call with a boolean mask, the per-row bandwidth folded
    into the query (q = beta(n_t) k_t, scale 1); rows with no pair (n_t = 0, e.g. the first position)
    output exactly zero.

Reparameterisations (paper, appendix C), each a function below: beta0, beta1 = exp(min(theta, 10)) from
theta = 1.5; alpha = min(|theta|, 1) from 1/3; alpha_psi = exp(min(|theta|, 15)) from 0; gamma drawn
from U(0, 1) and used as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memory_mosaics.config import MosaicsConfig

BETA_CAP, VALUE_SCALE_CAP = 10.0, 15.0
INIT_BETA_THETA, INIT_ALPHA_THETA = 1.5, 1.0 / 3.0


# ---------------------------------------------------------------------------------------------
# Reparameterisations and the adaptive bandwidth


def beta_param(theta: torch.Tensor) -> torch.Tensor:
    """beta0, beta1 = exp(min(theta, 10)) in (0, e^10]."""
    return torch.exp(torch.clamp(theta, max=BETA_CAP))


def alpha_param(theta: torch.Tensor) -> torch.Tensor:
    """The bandwidth exponent alpha = min(|theta|, 1) in [0, 1]."""
    return torch.clamp(theta.abs(), max=1.0)


def value_scale_param(theta: torch.Tensor) -> torch.Tensor:
    """alpha_psi = exp(min(|theta|, 15)) in [1, e^15]."""
    return torch.exp(torch.clamp(theta.abs(), max=VALUE_SCALE_CAP))


def bandwidth(n: torch.Tensor, beta0: torch.Tensor, beta1: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """beta(n) = beta1 n^alpha + beta0 for counts n (B, T) and per-head parameters (H,) -> (B, H, T)."""
    n = n.to(beta1.dtype)[:, None, :]  # (B, 1, T)
    return beta1[:, None] * n.pow(alpha[:, None]) + beta0[:, None]


# ---------------------------------------------------------------------------------------------
# Masks


def same_document(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) document ids -> (B, T, T) boolean, True where query t and pair i share a document."""
    return doc_ids[:, :, None] == doc_ids[:, None, :]


def short_term_mask(doc_ids: torch.Tensor, window: int) -> torch.Tensor:
    """Allowed pairs of the short-term memory: t-h+1 <= i <= t-1, same document. (B, T, T)."""
    t = torch.arange(doc_ids.shape[1], device=doc_ids.device)
    gap = t[:, None] - t[None, :]  # (T, T): t - i
    return same_document(doc_ids) & (gap >= 1) & (gap <= window - 1)


def long_term_mask(doc_ids: torch.Tensor, gap: int) -> torch.Tensor:
    """Allowed pairs of the long-term memory: i <= t-m, same document. (B, T, T)."""
    t = torch.arange(doc_ids.shape[1], device=doc_ids.device)
    return same_document(doc_ids) & (t[:, None] - t[None, :] >= gap)


# ---------------------------------------------------------------------------------------------
# Keys: the gated recurrence


def _starts(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) True where a document starts (position 0 or a change of id)."""
    start = torch.ones_like(doc_ids, dtype=torch.bool)
    start[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    return start


def gated_keys_reference(k_tilde, log_g, log_lam, doc_ids):
    """The recurrence as written, one step at a time. k_tilde (B, H, T, D), log_g/log_lam (B, H, T)."""
    starts = _starts(doc_ids)
    kbar = torch.zeros_like(k_tilde[:, :, 0])  # (B, H, D)
    out = []
    for t in range(k_tilde.shape[2]):
        prev = torch.where(starts[:, t, None, None], torch.zeros_like(kbar), kbar)
        kbar = log_g[:, :, t, None].exp() * k_tilde[:, :, t] + log_lam[:, :, t, None].exp() * prev
        out.append(F.normalize(kbar, dim=-1))
    return torch.stack(out, dim=2)  # (B, H, T, D)


def _pad_time(x: torch.Tensor, pad: int, dim: int, value: float = 0.0) -> torch.Tensor:
    if pad == 0:
        return x
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, x.new_full(shape, value)], dim=dim)


def gated_keys(k_tilde, log_g, log_lam, doc_ids, chunk: int = 32):
    """The same keys by a chunked scan: quadratic inside chunks of ``chunk`` steps, recurrent across them.

    Inside a chunk, kbar_t = sum_{s<=t} exp(log g_s + C_t - C_s) k~_s + exp(C_t) kbar_(chunk start - 1) with
    C_t the in-chunk cumulative sum of log lam (the carried term only while the document continues). Each
    row is kept as (r_t, m_t) with kbar_t = exp(m_t) r_t and m_t a running row maximum of the exponents, so
    no exponential overflows; m_t is detached because Norm makes the keys independent of it.
    """
    B, H, T, D = k_tilde.shape
    pad = (-T) % chunk
    fresh = doc_ids.min() - 1 - torch.arange(pad, device=doc_ids.device).expand(B, pad)  # padding: own documents
    doc = torch.cat([doc_ids, fresh], dim=1).view(B, -1, chunk)  # (B, N, C)
    kt = _pad_time(k_tilde, pad, 2).view(B, H, -1, chunk, D)  # (B, H, N, C, D)
    cum = _pad_time(log_lam, pad, 2).view(B, H, -1, chunk).cumsum(-1)  # (B, H, N, C): C_t
    source = _pad_time(log_g, pad, 2).view(B, H, -1, chunk) - cum  # log g_s - C_s
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=doc.device).tril()
    keep = (doc[..., :, None] == doc[..., None, :]) & tri  # (B, N, C, C): s <= t, same document
    logits = (cum[..., :, None] + source[..., None, :]).masked_fill(~keep[:, None], float("-inf"))
    m_in = logits.amax(-1).detach()  # (B, H, N, C); finite: s = t is always kept
    r_in = torch.exp(logits - m_in[..., None]) @ kt  # (B, H, N, C, D)
    rows, state, sigma = [r_in[:, :, 0]], r_in[:, :, 0, -1], m_in[:, :, 0, -1]
    for n in range(1, doc.shape[1]):
        carry = (sigma[..., None] + cum[:, :, n]).masked_fill(~(doc[:, n] == doc[:, n - 1, -1:])[:, None],
                                                              float("-inf"))  # (B, H, C)
        m = torch.maximum(m_in[:, :, n], carry).detach()
        r = (torch.exp(m_in[:, :, n] - m)[..., None] * r_in[:, :, n]
             + torch.exp(carry - m)[..., None] * state[:, :, None])
        rows.append(r)
        state, sigma = r[:, :, -1], m[:, :, -1]
    return F.normalize(torch.cat(rows, dim=2)[:, :, :T], dim=-1)


# ---------------------------------------------------------------------------------------------
# Values


def successor_values(proj: torch.Tensor, doc_ids: torch.Tensor, gamma: torch.Tensor, scale: torch.Tensor):
    """v_t = alpha_psi Norm(gamma p_t + (1 - gamma) p_{t+1}), p = W_psi x (B, H, T, D).

    p_{t+1} is zero at the last position and where t+1 starts another document, so a value never mixes
    two documents. The value of the last position is incomplete, but no position reads it (i < t).
    """
    nxt = torch.zeros_like(proj)
    nxt[:, :, :-1] = proj[:, :, 1:]
    next_starts = _starts(doc_ids).roll(-1, dims=1)  # (B, T): t+1 starts a document (wraps at T-1: zero anyway)
    nxt = nxt.masked_fill(next_starts[:, None, :, None], 0.0)
    g = gamma[None, :, None, None]
    return scale[None, :, None, None] * F.normalize(g * proj + (1 - g) * nxt, dim=-1)


# ---------------------------------------------------------------------------------------------
# Retrieval


def retrieve_reference(keys, values, allowed, beta):
    """Kernel regression with explicit loops. keys/values (B, H, T, D), allowed (B, T, T), beta (B, H, T)."""
    B, H, T, D = keys.shape
    out = torch.zeros_like(values)
    for b in range(B):
        for t in range(T):
            idx = allowed[b, t].nonzero()[:, 0]
            if len(idx) == 0:
                continue  # no pair: the memory contributes nothing
            for h in range(H):
                weights = torch.softmax(beta[b, h, t] * (keys[b, h, idx] @ keys[b, h, t]), dim=0)
                out[b, h, t] = weights @ values[b, h, idx]
    return out


def retrieve(keys, values, allowed, beta):
    """Kernel regression with one SDPA call; the bandwidth of each row is folded into its query."""
    n = allowed.sum(-1)  # (B, T)
    empty = n == 0
    mask = allowed.clone()
    mask[..., 0] |= empty  # a dummy pair keeps empty rows finite; their output is zeroed below
    out = F.scaled_dot_product_attention(beta[..., None] * keys, keys, values, attn_mask=mask[:, None], scale=1.0)
    return out.masked_fill(empty[:, None, :, None], 0.0)


# ---------------------------------------------------------------------------------------------
# One associative memory (short-term or long-term): projections, parameters, forward


class AssociativeMemory(nn.Module):
    """Multi-head associative memory; returns the retrieved values (B, T, H*D) before W_o."""

    def __init__(self, config: MosaicsConfig):
        super().__init__()
        d, H, D = config.hidden_size, config.num_attention_heads, config.head_dim
        self.num_heads, self.head_dim, self.chunk = H, D, config.scan_chunk
        self.key_proj = nn.Linear(d, H * D, bias=False)  # W_phi
        self.gate_proj = nn.Linear(d, H, bias=False)  # W_g: log g_t
        self.decay_proj = nn.Linear(d, H, bias=False)  # W_lam: -log lam_t = |W_lam x_t|
        self.value_proj = nn.Linear(d, H * D, bias=False)  # W_psi
        self.beta0_theta = nn.Parameter(torch.full((H,), INIT_BETA_THETA))
        self.beta1_theta = nn.Parameter(torch.full((H,), INIT_BETA_THETA))
        self.alpha_theta = nn.Parameter(torch.full((H,), INIT_ALPHA_THETA))
        self.value_scale_theta = nn.Parameter(torch.zeros(H))
        self.gamma = nn.Parameter(torch.rand(H))  # U(0, 1), no reparameterisation (as in the paper)

    def reset_memory_parameters(self) -> None:
        """The paper's initial values (called after the model's generic weight init)."""
        with torch.no_grad():
            self.beta0_theta.fill_(INIT_BETA_THETA)
            self.beta1_theta.fill_(INIT_BETA_THETA)
            self.alpha_theta.fill_(INIT_ALPHA_THETA)
            self.value_scale_theta.zero_()
            self.gamma.uniform_(0.0, 1.0)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, -1).transpose(1, 2)  # (B, H, T, D or 1)

    def keys_values(self, x: torch.Tensor, doc_ids: torch.Tensor, reference: bool = False):
        """Keys and values (B, H, T, D) of every position."""
        k_tilde = self._heads(self.key_proj(x))
        log_g = self._heads(self.gate_proj(x))[..., 0]  # (B, H, T)
        log_lam = -self._heads(self.decay_proj(x))[..., 0].abs()
        if reference:
            keys = gated_keys_reference(k_tilde, log_g, log_lam, doc_ids)
        else:
            keys = gated_keys(k_tilde, log_g, log_lam, doc_ids, self.chunk)
        values = successor_values(self._heads(self.value_proj(x)), doc_ids, self.gamma,
                                  value_scale_param(self.value_scale_theta))
        return keys, values

    def forward(self, x: torch.Tensor, doc_ids: torch.Tensor, allowed: torch.Tensor, reference: bool = False):
        keys, values = self.keys_values(x, doc_ids, reference)
        beta = bandwidth(allowed.sum(-1), beta_param(self.beta0_theta), beta_param(self.beta1_theta),
                         alpha_param(self.alpha_theta))  # (B, H, T)
        out = (retrieve_reference if reference else retrieve)(keys, values, allowed, beta)  # (B, H, T, D)
        B, H, T, D = out.shape
        return out.transpose(1, 2).reshape(B, T, H * D)
