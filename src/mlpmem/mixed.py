"""Memory-augmented inference: p = (1 - lam) * p_lm + lam * p_mem, in ONE backbone pass.

:class:`MemoryAugmentedLM` installs two hooks on the (frozen) Hugging Face causal LM:
  - a :class:`~mlpmem.backbone.KeyHook` capturing the keys f(c_t) at the memory's layer and site,
  - a forward hook on the backbone itself that replaces ``output.logits`` (B, T_keep, V) by
    ``mix_log_probs(log_softmax(lm_logits), log_softmax(memory(keys_kept)), lam)``.
The memory runs only on the positions whose logits are kept (``logits_to_keep``, which ``generate``
sets to 1), so a decoding step costs one backbone step plus one memory call on one position. The
memory is stateless per position, so the backbone's KV cache stays correct, and the stock
``backbone.generate`` works unchanged: greedy, sampling, beam search, batches with left padding.

The returned "logits" are mixed log-probabilities (they logsumexp to 0): argmax, softmax and
temperature act on them as on logits (softmax(log p / T) is p^(1/T) renormalised). With lam = 0 they
are exactly ``log_softmax`` of the backbone's logits, with lam = 1 exactly the memory's.
"""

from __future__ import annotations

import contextlib
import os

import torch
import torch.nn.functional as F
from torch import nn

from mlpmem.backbone import SITES, KeyHook, resolve_layer
from mlpmem.errors import ConfigError, FingerprintMismatch, MlpmemError
from mlpmem.memory import MLPMemory, verify_backbone
from mlpmem.mixing import check_lambda, mix_log_probs

try:  # the exact slicing the HF models apply to their hidden states before the LM head
    from transformers.modeling_utils import slice_logits_to_keep
except ImportError:  # pragma: no cover - older transformers
    slice_logits_to_keep = None


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


class MemoryAugmentedLM(nn.Module):
    """A frozen causal LM whose next-token distribution is mixed with an MLP Memory's.

    ``key_layer``/``key_site`` default to the ones recorded in ``memory.config``; if both are given they
    must agree (else FingerprintMismatch), as must the recorded backbone fingerprint (``tokenizer``
    optional: without it the tokenizer part is not checked).
    """

    def __init__(
        self,
        backbone: nn.Module,
        memory: MLPMemory,
        lam: float = 0.5,
        key_layer: int | float | None = None,
        key_site: str | None = None,
        tokenizer=None,
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
        self._depth = 0
        self._key_hook: KeyHook | None = None
        self._mix_handle = None

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

    @classmethod
    def from_pretrained(
        cls,
        memory_dir: str | os.PathLike,
        backbone_model: nn.Module,
        tokenizer=None,
        lam: float = 0.5,
        **kwargs,
    ) -> "MemoryAugmentedLM":
        """Load a saved memory next to ``backbone_model`` (fingerprint checked) on the backbone's device."""
        memory = MLPMemory.from_pretrained(memory_dir, backbone_model, tokenizer)
        memory.to(next(backbone_model.parameters()).device).eval()
        return cls(backbone_model, memory, lam=lam, tokenizer=tokenizer, **kwargs)

    def set_lambda(self, lam: float) -> None:
        """Set the mixing weight lam of p_mem (in [0, 1])."""
        self.lam = check_lambda(lam, "lam")

    # -- hooks

    @contextlib.contextmanager
    def active(self):
        """Install the key and mixing hooks on the backbone for the duration (re-entrant)."""
        if self._depth == 0:
            self._key_hook = KeyHook(self.backbone, self.key_layer, self.key_site).__enter__()
            self._mix_handle = self.backbone.register_forward_hook(self._mix_hook, with_kwargs=True)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._mix_handle.remove()
                self._key_hook.__exit__(None, None, None)
                self._mix_handle = self._key_hook = None

    def _mix_hook(self, module, args, kwargs, output):
        keys, self._key_hook.keys = self._key_hook.keys, None  # consume: a stale key is never reused
        if keys is None:
            raise MlpmemError(f"no key was captured at layer {self.key_layer} ({self.key_site})")
        as_tuple = isinstance(output, tuple)
        index = 1 if as_tuple and kwargs.get("labels") is not None else 0  # tuples put the loss first
        lm_logits = output[index] if as_tuple else output.logits  # (B, T_keep, V)
        mixed = self.mix(lm_logits, _keep_positions(keys, lm_logits, kwargs.get("logits_to_keep")))
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

    def _mixed_loss(self, mixed: torch.Tensor, labels) -> torch.Tensor | None:
        """The backbone's own causal-LM loss, recomputed on the mixed log-probs (they are valid logits)."""
        if labels is None:
            return None
        return self.backbone.loss_function(logits=mixed, labels=labels, vocab_size=mixed.shape[-1])

    def mix(self, lm_logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """log((1 - lam) p_lm + lam p_mem) in fp32 for backbone logits (..., V) and keys (..., d)."""
        logp_lm = F.log_softmax(lm_logits.float(), dim=-1)  # (..., V)
        if self.lam == 0.0:
            return logp_lm  # the memory is not run at all
        param = next(self.memory.parameters())
        mem_logits = self.memory(keys.to(device=param.device, dtype=param.dtype))  # (..., V)
        logp_mem = F.log_softmax(mem_logits.float().to(logp_lm.device), dim=-1)  # (..., V)
        return mix_log_probs(logp_lm, logp_mem, self.lam)  # (..., V)

    # -- delegation

    def forward(self, **kwargs):
        """The backbone's forward with mixed log-probs as ``logits`` (and the loss on them if labels)."""
        with self.active():
            return self.backbone(**kwargs)

    @torch.no_grad()
    def generate(self, **kwargs):
        """The backbone's stock ``generate`` on the mixed distribution (all decoding strategies)."""
        with self.active():
            return self.backbone.generate(**kwargs)
