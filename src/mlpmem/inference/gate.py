"""A learned gate: a mixing weight λ_t per position instead of one fixed λ.

    p_t = (1 - λ_t) p_lm + λ_t p_mem,    λ_t = sigmoid(g(features_t)),

where g is a small MLP on quantities that are free at decode time, computed from the two logit sets the
mixing already has (no second backbone pass):

    entropy_lm, log_max_lm    entropy (nats) and log of the largest probability of p_lm
    entropy_mem, log_max_mem  the same for p_mem
    log_lm_of_mem_argmax      log p_lm of the memory's most probable token
    log_mem_of_lm_argmax      log p_mem of the backbone's most probable token

(log-probabilities floored at :data:`LOG_FLOOR`; in log space the gate separates a sure memory from a merely
likely one better than on probabilities),

optionally with a low-dimensional projection of the key f(c_t) (``key_dim``; the key is RMS-normalised
first). The features are standardised by a shift and scale fitted on the gate's training data (buffers,
saved with the gate).

A corpus head's p_mem is exactly 0 outside its tokens (logits -inf): entropies leave out the 0 * -inf terms
(they add exactly 0) and the log p_mem of an uncovered token is the floor, so no feature is NaN or infinite.

Exactness. The gate runs in float64 (a few hundred weights, one row per kept position). The log-weights
log λ_t = logsigmoid(z) and log(1 - λ_t) = logsigmoid(-z) are rounded to fp32 and added the way
:func:`~mlpmem.inference.mixing.mix` adds a fixed λ's, so a constant gate (zero output
weights, bias logit(c)) gives the fixed-λ = c mixture bit for bit whenever fp32 rounds the float64 logs of
c and 1 - c as it rounds Python's (for practically every c). A sigmoid never reaches 0 or 1: λ_t is in (0, 1),
unless a floor is set (:meth:`Gate.set_floor`): then wherever the gate as trained (before its offset) gives a λ_t
below the floor, z is -inf (:meth:`Gate.mixing_logits`), λ_t is exactly 0 and the mixture is the backbone's
distribution exactly (no log(1 - λ_t) lowers the tokens the memory does not predict). The floor says where the
memory may speak, the offset how loudly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import check_lambda

FEATURES = ("entropy_lm", "log_max_lm", "entropy_mem", "log_max_mem", "log_lm_of_mem_argmax", "log_mem_of_lm_argmax")
"""The gate's decode-time features, in the order of the last dimension of :func:`gate_features`."""
NUM_FEATURES = len(FEATURES)
LOG_FLOOR = -30.0
"""Log-probability features below this (down to -inf: a token outside a corpus head) are this."""
FEATURE_VERSION = 2
"""Changes whenever a feature's definition or arithmetic changes (cached features and saved gates record it)."""
KEY_EPS = 1e-6


def check_floor(floor, what: str) -> float:
    """``floor`` as a float in [0, 1), else a one-line error naming ``what``."""
    if not isinstance(floor, (int, float)) or isinstance(floor, bool) or not 0.0 <= floor < 1.0:
        raise ConfigError(f"{what} must be a number in [0, 1), got {floor!r}")
    return float(floor)


@dataclass
class GateConfig(Config):
    """What the gate is: its hidden width and its inputs."""

    hidden_size: int = 16
    """Width of the gate's one hidden layer (SiLU); 0: a logistic regression on the inputs."""
    key_dim: int = 0
    """Size of the learned projection of the (RMS-normalised) key added to the inputs; 0: features only."""

    def validate(self) -> None:
        if not 0 <= self.hidden_size <= 4096:
            raise ConfigError(f"gate.hidden_size must be in [0, 4096], got {self.hidden_size}")
        if not 0 <= self.key_dim <= 1024:
            raise ConfigError(f"gate.key_dim must be in [0, 1024], got {self.key_dim}")


def _entropy(logits: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) (..., V) -> (...,) as lse - sum(p x): one fused softmax, one product.

    Where p = 0 and x = -inf (outside a corpus head) the product is NaN, and ``nansum`` leaves it out: such a
    token adds exactly 0, as it should.
    """
    return lse[..., 0] - (torch.softmax(logits, -1) * logits).nansum(-1)


def features_from_logits(lm: torch.Tensor, mem: torch.Tensor, lse_lm: torch.Tensor,
                         lse_mem: torch.Tensor) -> torch.Tensor:
    """The :data:`FEATURES` of fp32 logits (..., V) x 2 and their logsumexps (..., 1) -> (..., NUM_FEATURES)."""
    max_lm, arg_lm = lm.max(-1)  # (...,) each
    max_mem, arg_mem = mem.max(-1)
    lm_of_mem = lm.gather(-1, arg_mem[..., None])[..., 0]  # (...,)
    mem_of_lm = mem.gather(-1, arg_lm[..., None])[..., 0]  # (...,) -inf outside a corpus head
    shift = torch.cat([lse_lm, lse_mem, lse_lm, lse_mem], dim=-1)  # (..., 4)
    logs = (torch.stack([max_lm, max_mem, lm_of_mem, mem_of_lm], dim=-1) - shift).clamp_min(LOG_FLOOR)  # (..., 4)
    parts = [_entropy(lm, lse_lm), logs[..., 0], _entropy(mem, lse_mem), logs[..., 1], logs[..., 2], logs[..., 3]]
    return torch.stack(parts, dim=-1)  # (..., NUM_FEATURES)


def gate_features(lm_logits: torch.Tensor, mem_logits: torch.Tensor) -> torch.Tensor:
    """The :data:`FEATURES` of two logit sets (..., V) -> (..., NUM_FEATURES) fp32."""
    lm, mem = lm_logits.float(), mem_logits.float()
    lse_lm, lse_mem = torch.logsumexp(lm, -1, keepdim=True), torch.logsumexp(mem, -1, keepdim=True)
    return features_from_logits(lm, mem, lse_lm, lse_mem)


class Gate(nn.Module):
    """λ_t = sigmoid(g(x_t)): standardised features (and a key projection) -> one logit per position.

    ``key_size`` is the size of the memory's keys (needed when ``config.key_dim > 0``). All weights and buffers
    are float64; inputs of any float dtype are cast.
    """

    def __init__(self, config: GateConfig, key_size: int | None = None):
        super().__init__()
        if config.key_dim and not key_size:
            raise ConfigError("a gate with key_dim > 0 needs key_size (the size of the memory's keys)")
        self.config, self.key_size = config, key_size if config.key_dim else None
        self.register_buffer("feature_shift", torch.zeros(NUM_FEATURES, dtype=torch.float64))
        self.register_buffer("feature_scale", torch.ones(NUM_FEATURES, dtype=torch.float64))
        inputs = NUM_FEATURES + config.key_dim
        self.key_proj = nn.Linear(key_size, config.key_dim, bias=False) if config.key_dim else None
        self.hidden = nn.Linear(inputs, config.hidden_size) if config.hidden_size else None
        self.out = nn.Linear(config.hidden_size or inputs, 1)
        self.offset = 0.0
        """Added to every logit z; a use's calibration (e.g. chosen on a task's validation questions), not saved."""
        self.floor = 0.0
        """Where the gate before its offset gives λ_t below this, λ_t is exactly 0 (the backbone alone there); a
        use's calibration like :attr:`offset`."""
        self.to(torch.float64)

    @property
    def uses_keys(self) -> bool:
        return self.key_proj is not None

    def fit_standardisation(self, features: torch.Tensor) -> None:
        """Set the shift and scale of the features to their mean and standard deviation over rows (n, F)."""
        x = features.double().reshape(-1, NUM_FEATURES)
        self.feature_shift.copy_(x.mean(0))
        self.feature_scale.copy_(x.std(0).clamp_min(1e-6) if x.shape[0] > 1 else torch.ones(NUM_FEATURES))

    def set_constant(self, lam: float) -> Gate:
        """Make the gate output ``lam`` everywhere: zero output weights, bias logit(lam); ``lam`` in (0, 1)."""
        lam = check_lambda(lam, "gate constant")
        if lam in (0.0, 1.0):
            raise ConfigError("a gate's λ_t is a sigmoid: a constant gate needs 0 < λ < 1 (use a fixed λ for 0 or 1)")
        with torch.no_grad():
            self.out.weight.zero_()
            self.out.bias.fill_(math.log(lam) - math.log1p(-lam))
        return self

    def set_offset(self, offset: float) -> Gate:
        """Shift every logit by ``offset`` (> 0 opens the gate everywhere, keeping where it opens most)."""
        if not isinstance(offset, (int, float)) or isinstance(offset, bool) or not math.isfinite(offset):
            raise ConfigError(f"a gate offset is a finite number, got {offset!r}")
        self.offset = float(offset)
        return self

    def set_floor(self, floor: float) -> Gate:
        """Close the gate exactly (λ_t = 0) wherever its λ_t before the offset is below ``floor``, in [0, 1); 0: no
        floor."""
        self.floor = check_floor(floor, "a gate floor")
        return self

    def closed(self, z: torch.Tensor) -> torch.Tensor | None:
        """Where the gate's logits z (...,) (offset included, as :meth:`forward` gives them) were below the floor
        before the offset (bool, same shape); None without a floor."""
        if not self.floor:
            return None
        return z - self.offset < math.log(self.floor) - math.log1p(-self.floor)

    def forward(self, features: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """The gate's logit z (...,) float64 (:attr:`offset` added) for features (..., F) and, if it uses them,
        keys (..., d)."""
        x = (features.to(self.feature_shift) - self.feature_shift) / self.feature_scale  # (..., F)
        if self.key_proj is not None:
            if keys is None:
                raise ConfigError("this gate reads the key (key_dim > 0): pass keys")
            k = keys.to(self.feature_shift)
            k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + KEY_EPS)  # (..., d) RMS-normalised
            x = torch.cat([x, self.key_proj(k)], dim=-1)  # (..., F + key_dim)
        if self.hidden is not None:
            x = F.silu(self.hidden(x))  # (..., H)
        return self.out(x)[..., 0] + self.offset  # (...,)

    def mixing_logits(self, features: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """The gate's logits z (...,) float64 as :func:`~mlpmem.inference.mixing.mix` takes them: λ_t = sigmoid(z),
        and -inf below the floor (λ_t exactly 0)."""
        z = self(features, keys)
        closed = self.closed(z)
        return z if closed is None else z.masked_fill(closed, -math.inf)

    def lam(self, features: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """λ_t = sigmoid(z) (...,) float64, in (0, 1); exactly 0 below the floor."""
        return torch.sigmoid(self.mixing_logits(features, keys))
