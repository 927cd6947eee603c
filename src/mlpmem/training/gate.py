"""Training the gate: backbone and memory frozen, maximise the mixture's log-likelihood of the targets.

The gate sees, per position, its features (:func:`mlpmem.inference.gate.gate_features`, computed once) and the
two log-probabilities of the target, log p_lm(y_t) and log p_mem(y_t): the mixture's log-likelihood

    log((1 - λ_t) p_lm(y_t) + λ_t p_mem(y_t)),   λ_t = sigmoid(g(features_t))

needs nothing else, so training is full-batch Adam on a few floats per position (seconds). The data is a slice
held out from the memory's training (the run's validation split, never test); a seeded part of it, cut in
contiguous blocks of positions (neighbouring positions share context), is held out again for early stopping.
The gate starts as the constant fixed λ (zero output weights), so step 0 is the fixed-λ mixture and the weights
kept (the lowest held-out loss) are never worse than it on the held-out part.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from mlpmem.errors import ConfigError
from mlpmem.inference.gate import NUM_FEATURES, Gate, GateConfig
from mlpmem.inference.mixing import mix

INIT_RANGE = (0.01, 0.99)
"""The constant the gate starts from is the fixed λ clipped to this range (a sigmoid never reaches 0 or 1)."""


@dataclass
class GateTrainConfig(GateConfig):
    """The pipeline's ``gate:`` section: what the gate is (:class:`GateConfig`) and how it is trained."""

    lr: float = 0.01
    """Adam's learning rate (full batch)."""
    weight_decay: float = 0.0
    max_steps: int = 2000
    patience: int = 100
    """Stop after this many steps in a row without a lower held-out loss."""
    holdout_fraction: float = 0.2
    """Fraction of the training slice's blocks held out for early stopping."""
    block: int = 256
    """Positions per contiguous block of the held-out split."""
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        if not self.lr > 0 or self.weight_decay < 0:
            raise ConfigError(f"gate.lr must be > 0 and gate.weight_decay >= 0, got {self.lr}, {self.weight_decay}")
        if self.max_steps < 0 or self.patience < 1 or self.block < 1:
            raise ConfigError("gate.max_steps must be >= 0, gate.patience and gate.block >= 1")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ConfigError(f"gate.holdout_fraction must be in (0, 1), got {self.holdout_fraction}")

    def model_config(self) -> GateConfig:
        return GateConfig(hidden_size=self.hidden_size, key_dim=self.key_dim)


@dataclass
class GateData:
    """What the gate trains or is scored on, one row per position."""

    features: torch.Tensor  # (n, F) fp32
    lp_lm: torch.Tensor  # (n,) float64, log p_lm(y_t)
    lp_mem: torch.Tensor  # (n,) float64, log p_mem(y_t) (-inf where a corpus head does not hold y_t)
    keys: torch.Tensor | None = None  # (n, d), only for a gate that reads keys

    def __post_init__(self):
        n = self.lp_lm.shape[0]
        if self.features.shape != (n, NUM_FEATURES) or self.lp_mem.shape != (n,) or n == 0:
            raise ConfigError(f"gate data: features {tuple(self.features.shape)}, lp_lm {tuple(self.lp_lm.shape)} "
                              f"and lp_mem {tuple(self.lp_mem.shape)} must have the same n >= 1 rows")
        if self.keys is not None and self.keys.shape[0] != n:
            raise ConfigError(f"gate data: {self.keys.shape[0]} keys for {n} positions")

    def __len__(self) -> int:
        return self.lp_lm.shape[0]

    def subset(self, index: torch.Tensor) -> GateData:
        keys = None if self.keys is None else self.keys[index]
        return GateData(self.features[index], self.lp_lm[index], self.lp_mem[index], keys)


def holdout_split(n: int, block: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held-out) row indices: contiguous blocks of ``block`` rows, a seeded ``fraction`` of them held
    out, at least one block each side (fewer than two blocks: the rows are cut into two halves)."""
    if n < 2:
        raise ConfigError(f"the gate needs at least 2 positions to train and hold out, got {n}")
    if math.ceil(n / block) < 2:
        block = math.ceil(n / 2)
    blocks = math.ceil(n / block)
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed))
    held = order[: min(blocks - 1, max(1, round(fraction * blocks)))]
    is_held = torch.zeros(n, dtype=torch.bool)
    for b in held.tolist():
        is_held[b * block : (b + 1) * block] = True
    rows = torch.arange(n)
    return rows[~is_held], rows[is_held]


def nll(gate: Gate, data: GateData) -> torch.Tensor:
    """Mean negative log-likelihood (nats/token) of the gated mixture on ``data``."""
    return -mix(data.lp_lm.double(), data.lp_mem.double(), gate(data.features, data.keys), logits=False).mean()


def train_gate(data: GateData, config: GateTrainConfig, init_lambda: float,
               key_size: int | None = None) -> tuple[Gate, dict]:
    """A gate trained on ``data`` (the best held-out step's weights) and its training history."""
    torch.manual_seed(config.seed)
    train_rows, held_rows = holdout_split(len(data), config.block, config.holdout_fraction, config.seed)
    train, held = data.subset(train_rows), data.subset(held_rows)
    gate = Gate(config.model_config(), key_size)
    gate.fit_standardisation(train.features)
    start = float(np.clip(init_lambda, *INIT_RANGE))
    gate.set_constant(start)
    optimizer = torch.optim.Adam(gate.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    with torch.no_grad():
        best, best_step, best_state = nll(gate, held).item(), 0, copy.deepcopy(gate.state_dict())
    history = [{"step": 0, "train_nll": None, "holdout_nll": best}]
    step = 0
    for step in range(1, config.max_steps + 1):
        optimizer.zero_grad()
        with torch.enable_grad():  # also when called under no_grad
            loss = nll(gate, train)
            loss.backward()
        optimizer.step()
        with torch.no_grad():
            held_nll = nll(gate, held).item()
        if held_nll < best:
            best, best_step, best_state = held_nll, step, copy.deepcopy(gate.state_dict())
        if step % 50 == 0 or step == config.max_steps:
            history.append({"step": step, "train_nll": loss.item(), "holdout_nll": held_nll})
        if step - best_step >= config.patience:
            break
    gate.load_state_dict(best_state)
    summary = {"init_lambda": start, "best_step": best_step, "steps": step, "train_rows": len(train),
               "holdout_rows": len(held), "holdout_ppl_init": math.exp(history[0]["holdout_nll"]),
               "holdout_ppl_best": math.exp(best), "history": history}
    return gate.eval(), summary
