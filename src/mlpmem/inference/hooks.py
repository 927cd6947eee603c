"""How the memory is mixed into the backbone's own forward: hooks, installed for the duration of a call.

:class:`MixingHooks` (a part of :class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM`) installs on the
(frozen) Hugging Face causal LM
  - a :class:`~mlpmem.backbone.KeyHook` capturing the keys f(c_t) at the memory's layer and site,
  - a forward hook on the backbone itself that replaces ``output.logits`` (B, T_keep, V) by
    ``log((1 - λ) softmax(lm_logits) + λ softmax(memory(keys_kept)))`` (:func:`~mlpmem.inference.mixing.mix`).
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
    once per step instead of twice;
  - :func:`~mlpmem.inference.mixing.mix` takes both logit sets straight to the mixture (no log_softmax tensors).

With a :class:`~mlpmem.inference.gate.Gate` the weight is λ_t per kept position instead of λ: the gate reads
features of the two logit sets the hook already holds (and the kept keys), so it adds no backbone pass and works
on every path above. The λ_t of the latest forward are kept in ``last_lambda`` (B, T_keep).

Two methods are the places to change one step (the inference benchmark's ladder does, to measure each
optimisation): :meth:`MixingHooks.memory_logits` (the memory on the kept positions) and
:meth:`MixingHooks.mixture` (the two logit sets to mixed log-probabilities).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from mlpmem.backbone import KeyHook, keep_positions
from mlpmem.errors import MlpmemError
from mlpmem.inference.gate import gate_features
from mlpmem.inference.mixing import mix


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


class MixingHooks:
    """The hooks of a memory-augmented model; the host holds ``backbone``, ``memory``, ``gate``, ``lam``,
    ``key_layer``, ``key_site``, ``fuse_head``, ``memory_needed`` and calls :meth:`_reset_hooks` once."""

    def _reset_hooks(self) -> None:
        self._depth = 0
        self._key_hook: KeyHook | None = None
        self._handles: list = []
        self._logits_to_keep = None  # of the current forward call, for the fused head's key slicing
        self._fused_batch: int | None = None  # set by the head pre-hook when it appended the memory's rows
        self._mem_logits: torch.Tensor | None = None  # the memory's half of the fused head output
        self._kept_keys: torch.Tensor | None = None  # the kept positions' keys, for a gate that reads them
        self.last_lambda: torch.Tensor | None = None  # (B, T_keep) the gate's λ_t of the latest forward

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
        kept = keep_positions(self._take_keys(), h_lm, self._logits_to_keep)  # (B, T_keep, d)
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
                    self._kept_keys = keep_positions(keys, lm_logits, kwargs.get("logits_to_keep"))
                mem_logits = self.memory_logits(keys, lm_logits, kwargs.get("logits_to_keep"))
            keys, self._kept_keys = self._kept_keys, None
            mixed = self.mixture(lm_logits, mem_logits, keys)
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

    def memory_logits(self, keys: torch.Tensor, lm_logits: torch.Tensor, logits_to_keep) -> torch.Tensor:
        """The memory's logits (B, T_keep, V) at the kept positions of keys (B, T, d) (its own head)."""
        param = next(self.memory.parameters())
        kept = keep_positions(keys, lm_logits, logits_to_keep)  # (B, T_keep, d)
        return self.memory(kept.to(device=param.device, dtype=param.dtype)).to(lm_logits.device)

    def mixture(self, lm_logits: torch.Tensor, mem_logits: torch.Tensor, keys: torch.Tensor | None = None
                ) -> torch.Tensor:
        """log((1 - λ) p_lm + λ p_mem) fp32 (..., V) from both logit sets, at the gate's λ_t if there is a gate
        (kept in ``last_lambda``; ``keys`` (..., d) for a gate that reads them)."""
        if self.gate is None:
            return mix(lm_logits, mem_logits, self.lam)
        if keys is not None:
            keys = keys.to(lm_logits.device)
        z = self.gate.mixing_logits(gate_features(lm_logits, mem_logits), keys)  # (...,) float64
        self.last_lambda = torch.sigmoid(z)
        return mix(lm_logits, mem_logits, z)

    def _mixed_loss(self, mixed: torch.Tensor, labels) -> torch.Tensor | None:
        """The backbone's own causal-LM loss, recomputed on the mixed log-probs (they are valid logits)."""
        if labels is None:
            return None
        return self.backbone.loss_function(logits=mixed, labels=labels, vocab_size=mixed.shape[-1])

    def mix(self, lm_logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """log((1 - λ) p_lm + λ p_mem) in fp32 for backbone logits (..., V) and keys (..., d) (λ_t with a gate)."""
        if not self.memory_needed:
            return F.log_softmax(lm_logits.float(), dim=-1)  # the memory is not run at all
        param = next(self.memory.parameters())
        mem_logits = self.memory(keys.to(device=param.device, dtype=param.dtype)).to(lm_logits.device)  # (..., V)
        return self.mixture(lm_logits, mem_logits, keys if self.gate is not None and self.gate.uses_keys else None)
