"""Memory-augmented inference: p = (1 - lam) * p_lm + lam * p_mem, in ONE backbone pass.

:class:`MemoryAugmentedLM` installs two hooks on the (frozen) Hugging Face causal LM:
  - a :class:`~mlpmem.backbone.KeyHook` capturing the keys f(c_t) at the memory's layer and site,
  - a forward hook on the backbone itself that replaces ``output.logits`` (B, T_keep, V) by
    ``log((1 - lam) softmax(lm_logits) + lam softmax(memory(keys_kept)))`` (:func:`mix_logits`).
The memory runs only on the positions whose logits are kept (``logits_to_keep``, which ``generate``
sets to 1), so a decoding step costs one backbone step plus one memory call on one position. The
memory is stateless per position, so the backbone's KV cache stays correct, and the stock
``backbone.generate`` works unchanged: greedy, sampling, beam search, batches with left padding.

Decode cost. At batch 1 a small model is bound by reading its weights, so the memory's overhead is
at best its extra weight bytes. Three details keep it there:
  - keys come from the hook in the backbone's own forward (one backbone pass, never two);
  - fused tied head: when the memory's head IS the backbone's output embedding (``tie_head``), a
    pre-hook on the backbone's ``lm_head`` appends the memory's final hidden states to the LM's, so
    one matrix product over (2B, T_keep, d) yields both logit sets and the (V, d) embedding is read
    once per step instead of twice (:func:`tied_head_logits` is the same product as a function);
  - :func:`mix_logits` takes both logit sets straight to the mixture: one logsumexp reduction for
    both normalisers, then one ``logaddexp`` pass (no separate log_softmax tensors).

The returned "logits" are mixed log-probabilities (they logsumexp to 0): argmax, softmax and
temperature act on them as on logits (softmax(log p / T) is p^(1/T) renormalised). With lam = 0 they
are exactly ``log_softmax`` of the backbone's logits, with lam = 1 exactly the memory's.

With a :class:`~mlpmem.inference.gate.Gate` the weight is λ_t per kept position instead of ``lam``: the gate
reads features of the two logit sets the hook already holds (and the kept keys), so it adds no backbone pass
and works on every path above (``forward``, stock ``generate`` with its cache, the fused head). The λ_t of
the latest forward are kept in ``last_lambda`` (B, T_keep).
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from mlpmem.backbone import SITES, KeyHook, resolve_layer
from mlpmem.errors import ConfigError, FingerprintMismatch, MlpmemError
from mlpmem.inference.gate import Gate, gated_mix_logits
from mlpmem.inference.gate_io import load_gate
from mlpmem.inference.mixing import check_lambda
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import verify_backbone

try:  # the exact slicing the HF models apply to their hidden states before the LM head
    from transformers.modeling_utils import slice_logits_to_keep
except ImportError:  # pragma: no cover - older transformers
    slice_logits_to_keep = None


def mix_logits(lm_logits: torch.Tensor, mem_logits: torch.Tensor, lam: float) -> torch.Tensor:
    """log((1 - lam) softmax(lm_logits) + lam softmax(mem_logits)) in fp32, for logits (..., V).

    With c_x = log(w_x) - logsumexp(x) (one scalar per row) the mixture is logaddexp(lm + c_lm, mem + c_mem):
    one reduction per distribution for its normaliser, then one fused elementwise pass, never the two
    intermediate log_softmax tensors. lam = 0 returns exactly ``log_softmax(lm_logits)`` (the memory is
    not needed) and lam = 1 exactly ``log_softmax(mem_logits)``.
    """
    lam = check_lambda(lam, "lam")
    if lam == 0.0:
        return F.log_softmax(lm_logits.float(), dim=-1)
    if lam == 1.0:
        return F.log_softmax(mem_logits.float(), dim=-1)
    lm, mem = lm_logits.float(), mem_logits.float()  # (..., V) each
    c_lm = math.log1p(-lam) - torch.logsumexp(lm, dim=-1, keepdim=True)  # (..., 1)
    c_mem = math.log(lam) - torch.logsumexp(mem, dim=-1, keepdim=True)  # (..., 1)
    return torch.logaddexp(lm + c_lm, mem + c_mem)  # (..., V)


def tied_head_logits(weight: torch.Tensor, h_lm: torch.Tensor, h_mem: torch.Tensor, bias=None):
    """Both vocabulary projections of a tied head in ONE matrix product: (B, T, d) x 2 -> (B, T, V) x 2.

    Equal to ``F.linear(h_lm, weight, bias)`` and ``F.linear(h_mem, weight, bias)`` up to float rounding;
    the (V, d) weight is read once instead of twice.
    """
    both = F.linear(torch.cat([h_lm, h_mem.to(h_lm.dtype)], dim=0), weight, bias)  # (2B, T, V)
    return both[: h_lm.shape[0]], both[h_lm.shape[0] :]


def _keep_positions(keys: torch.Tensor, logits: torch.Tensor, logits_to_keep) -> torch.Tensor:
    """The keys of the positions whose logits the backbone kept: (B, T, d) -> (B, T_keep, d)."""
    if slice_logits_to_keep is not None and logits_to_keep is not None:
        kept = slice_logits_to_keep(keys, logits_to_keep)
    else:
        kept = keys[:, -logits.shape[1] :]  # an int logits_to_keep keeps the last positions
    if kept.shape[:-1] != logits.shape[:-1]:
        raise MlpmemError(
            f"cannot align keys {tuple(keys.shape)} with logits {tuple(logits.shape)} "
            f"(logits_to_keep={logits_to_keep!r})"
        )
    return kept


class BackboneWrapper(nn.Module):
    """A backbone whose forward and stock ``generate`` run with the wrapper's hooks installed.

    Subclasses hold ``self.backbone`` and define ``active()``, a context that installs their hooks (the key
    capture and the mixing of the output logits) for its duration.
    """

    def forward(self, **kwargs):
        """The backbone's forward with mixed log-probs as ``logits`` (and the loss on them if labels)."""
        with self.active():
            return self.backbone(**kwargs)

    @torch.no_grad()
    def generate(self, **kwargs):
        """The backbone's stock ``generate`` on the mixed distribution (all decoding strategies)."""
        with self.active():
            return self.backbone.generate(**kwargs)


class MemoryAugmentedLM(BackboneWrapper):
    """A frozen causal LM whose next-token distribution is mixed with an MLP Memory's.

    ``key_layer``/``key_site`` default to the ones recorded in ``memory.config``; if both are given they
    must agree (else FingerprintMismatch), as must the recorded backbone fingerprint (``tokenizer``
    optional: without it the tokenizer part is not checked). ``fuse_head`` (default: whenever the
    memory's head is tied to the backbone's output embedding) computes both vocabulary projections in
    one matrix product; ``False`` runs the memory's own head separately (same result up to rounding).
    ``gate`` (optional, see :meth:`set_gate`) replaces the fixed ``lam`` by a λ_t per position.
    """

    def __init__(
        self,
        backbone: nn.Module,
        memory: MLPMemory,
        lam: float = 0.5,
        key_layer: int | float | None = None,
        key_site: str | None = None,
        tokenizer=None,
        fuse_head: bool | None = None,
        gate: Gate | None = None,
    ):
        super().__init__()
        config = memory.config
        if config.backbone is not None:
            verify_backbone(config.backbone, backbone, tokenizer, "the memory")
        self.backbone, self.memory = backbone, memory
        self.key_layer = self._resolve_key_layer(key_layer)
        self.key_site = self._resolve_key_site(key_site)
        vocab = int(backbone.get_output_embeddings().weight.shape[0])
        if vocab != config.vocab_size:
            raise ConfigError(f"memory vocab_size {config.vocab_size} differs from the backbone's {vocab}")
        self.lam = check_lambda(lam, "lam")
        self.fuse_head = self._resolve_fuse_head(fuse_head)
        self._depth = 0
        self._key_hook: KeyHook | None = None
        self._handles: list = []
        self._logits_to_keep = None  # of the current forward call, for the fused head's key slicing
        self._fused_batch: int | None = None  # set by the head pre-hook when it appended the memory's rows
        self._mem_logits: torch.Tensor | None = None  # the memory's half of the fused head output
        self._kept_keys: torch.Tensor | None = None  # the kept positions' keys, for a gate that reads them
        self.gate: Gate | None = None
        self.last_lambda: torch.Tensor | None = None  # (B, T_keep) the gate's λ_t of the latest forward
        self.set_gate(gate)

    def _resolve_key_layer(self, key_layer) -> int:
        recorded = self.memory.config.key_layer
        if key_layer is None and recorded is None:
            raise ConfigError("key_layer is needed: the memory config does not record one")
        layer = resolve_layer(self.backbone, recorded if key_layer is None else key_layer)
        if recorded is not None and layer != recorded:
            raise FingerprintMismatch(f"the memory was trained on keys of layer {recorded}, not layer {layer}")
        return layer

    def _resolve_key_site(self, key_site) -> str:
        recorded = self.memory.config.key_site
        site = key_site or recorded or "ffn_input"
        if site not in SITES:
            raise ConfigError(f"key_site must be one of {SITES}, got {site!r}")
        if recorded is not None and site != recorded:
            raise FingerprintMismatch(f"the memory was trained on {recorded!r} keys, not {site!r}")
        return site

    def _resolve_fuse_head(self, fuse_head: bool | None) -> bool:
        head = self.backbone.get_output_embeddings()
        shared = self.memory.config.tie_head and self.memory.head.weight is head.weight
        if fuse_head and not shared:
            raise ConfigError("fuse_head needs a memory head tied to the backbone's output embedding")
        return shared if fuse_head is None else bool(fuse_head)

    @classmethod
    def from_pretrained(
        cls,
        memory_dir: str | os.PathLike,
        backbone_model: nn.Module,
        tokenizer=None,
        lam: float = 0.5,
        gate_dir: str | os.PathLike | None = None,
        **kwargs,
    ) -> MemoryAugmentedLM:
        """Load a saved memory next to ``backbone_model`` (fingerprint checked) on the backbone's device, and the
        gate saved in ``gate_dir`` if given (refused unless it was trained with this memory)."""
        memory = MLPMemory.from_pretrained(memory_dir, backbone_model, tokenizer)
        gate = None if gate_dir is None else load_gate(gate_dir, memory)
        memory.to(next(backbone_model.parameters()).device).eval()
        return cls(backbone_model, memory, lam=lam, tokenizer=tokenizer, gate=gate, **kwargs)

    def set_lambda(self, lam: float) -> None:
        """Set the mixing weight lam of p_mem (in [0, 1]); with a gate set, the gate's λ_t are used instead."""
        self.lam = check_lambda(lam, "lam")

    def set_gate(self, gate: Gate | None) -> None:
        """Mix with the gate's λ_t per position (moved to the backbone's device), or with the fixed ``lam``
        again (``None``)."""
        if gate is not None:
            if gate.uses_keys and gate.key_size != self.memory.config.input_size:
                raise ConfigError(f"the gate reads keys of size {gate.key_size}, the memory's are "
                                  f"{self.memory.config.input_size}")
            gate = gate.to(next(self.backbone.parameters()).device).eval()
        self.gate = gate

    @property
    def memory_needed(self) -> bool:
        """Whether the memory runs at all: with a gate, or with lam > 0."""
        return self.gate is not None or self.lam != 0.0

    # -- hooks

    @contextlib.contextmanager
    def active(self):
        """Install the key and mixing hooks on the backbone for the duration (re-entrant)."""
        if self._depth == 0:
            self._install()
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._remove()

    def _install(self) -> None:
        self._key_hook = KeyHook(self.backbone, self.key_layer, self.key_site).__enter__()
        backbone = self.backbone
        self._handles = [
            backbone.register_forward_pre_hook(self._record_kwargs, with_kwargs=True),
            backbone.register_forward_hook(self._mix_hook, with_kwargs=True),
        ]
        if self.fuse_head:
            head = backbone.get_output_embeddings()
            self._handles += [head.register_forward_pre_hook(self._head_pre_hook),
                              head.register_forward_hook(self._head_post_hook)]

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._key_hook.__exit__(None, None, None)
        self._handles, self._key_hook, self._mem_logits, self._kept_keys = [], None, None, None

    def _record_kwargs(self, module, args, kwargs):
        self._logits_to_keep, self._mem_logits, self._fused_batch = kwargs.get("logits_to_keep"), None, None
        self._kept_keys = None

    def _take_keys(self) -> torch.Tensor:
        keys, self._key_hook.keys = self._key_hook.keys, None  # consume: a stale key is never reused
        if keys is None:
            raise MlpmemError(f"no key was captured at layer {self.key_layer} ({self.key_site})")
        return keys

    def _head_pre_hook(self, module, args):
        """Fused head: feed [h_lm; h_mem] (2B, T_keep, d) to the shared lm_head (one weight read)."""
        if not self.memory_needed:
            return None  # the memory is not run at all
        h_lm = args[0]  # (B, T_keep, d)
        kept = _keep_positions(self._take_keys(), h_lm, self._logits_to_keep)  # (B, T_keep, d)
        if self.gate is not None and self.gate.uses_keys:
            self._kept_keys = kept
        h_mem = self.memory.features(kept.to(self.memory.norm.weight.device))  # (B, T_keep, d)
        self._fused_batch = h_lm.shape[0]
        return (torch.cat([h_lm, h_mem.to(h_lm.dtype)], dim=0),)  # (2B, T_keep, d)

    def _head_post_hook(self, module, args, output):
        batch, self._fused_batch = self._fused_batch, None
        if batch is None:
            return None
        self._mem_logits = output[batch:]  # (B, T_keep, V) the memory's logits
        return output[:batch]  # (B, T_keep, V) the backbone's logits

    def _mix_hook(self, module, args, kwargs, output):
        as_tuple = isinstance(output, tuple)
        index = 1 if as_tuple and kwargs.get("labels") is not None else 0  # tuples put the loss first
        lm_logits = output[index] if as_tuple else output.logits  # (B, T_keep, V)
        mem_logits, self._mem_logits = self._mem_logits, None
        if not self.memory_needed:
            self._take_keys()  # consumed unused: the memory is not run at all
            mixed = F.log_softmax(lm_logits.float(), dim=-1)
        else:
            if mem_logits is None:  # separate head: run the whole memory on the kept positions
                keys = self._take_keys()
                if self.gate is not None and self.gate.uses_keys:
                    self._kept_keys = _keep_positions(keys, lm_logits, kwargs.get("logits_to_keep"))
                mem_logits = self._memory_logits(keys, lm_logits, kwargs.get("logits_to_keep"))
            if self.gate is None:
                mixed = self._mix_logits(lm_logits, mem_logits)
            else:
                mixed = self._gate_mix(lm_logits, mem_logits)
        loss = self._mixed_loss(mixed, kwargs.get("labels"))
        if as_tuple:
            parts = list(output)
            parts[index] = mixed
            if loss is not None:
                parts[0] = loss
            return type(output)(parts)
        output.logits = mixed
        if loss is not None:
            output.loss = loss
        return output

    def _memory_logits(self, keys: torch.Tensor, lm_logits: torch.Tensor, logits_to_keep) -> torch.Tensor:
        """The memory's logits (B, T_keep, V) at the kept positions of keys (B, T, d)."""
        param = next(self.memory.parameters())
        kept = _keep_positions(keys, lm_logits, logits_to_keep)  # (B, T_keep, d)
        return self.memory(kept.to(device=param.device, dtype=param.dtype)).to(lm_logits.device)

    def _mix_logits(self, lm_logits: torch.Tensor, mem_logits: torch.Tensor) -> torch.Tensor:
        return mix_logits(lm_logits, mem_logits, self.lam)

    def _gate_mix(self, lm_logits: torch.Tensor, mem_logits: torch.Tensor) -> torch.Tensor:
        """The mixture at the gate's λ_t (kept in ``last_lambda``); the kept keys are consumed."""
        keys, self._kept_keys = self._kept_keys, None
        if keys is not None:
            keys = keys.to(lm_logits.device)
        mixed, self.last_lambda = gated_mix_logits(lm_logits, mem_logits, self.gate, keys)
        return mixed

    def _mixed_loss(self, mixed: torch.Tensor, labels) -> torch.Tensor | None:
        """The backbone's own causal-LM loss, recomputed on the mixed log-probs (they are valid logits)."""
        if labels is None:
            return None
        return self.backbone.loss_function(logits=mixed, labels=labels, vocab_size=mixed.shape[-1])

    def mix(self, lm_logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """log((1 - lam) p_lm + lam p_mem) in fp32 for backbone logits (..., V) and keys (..., d) (λ_t with a
        gate)."""
        if not self.memory_needed:
            return F.log_softmax(lm_logits.float(), dim=-1)  # the memory is not run at all
        param = next(self.memory.parameters())
        mem_logits = self.memory(keys.to(device=param.device, dtype=param.dtype)).to(lm_logits.device)  # (..., V)
        if self.gate is None:
            return mix_logits(lm_logits, mem_logits, self.lam)
        mixed, self.last_lambda = gated_mix_logits(lm_logits, mem_logits, self.gate, keys.to(lm_logits.device))
        return mixed
