"""The MLP Memory: a stack of attention-free feed-forward blocks mapping a key to next-token logits.

The frozen backbone produces a key f(c_t) (hidden state at one decoder layer, see ``backbone.KeyHook``);
the memory maps it to logits over the vocabulary:

    x_0 = W_in f(c_t)                      (W_in only if hidden_size != input_size)
    x_l = x_{l-1} + FFN_l(Norm_l(x_{l-1}))  for l = 1..L   (no attention, no positions)
    logits = W_head Norm_f(x_L)             p_mem = softmax(logits)

The blocks are the memory's own (:mod:`mlpmem.memory.blocks`: by default RMSNorm + SwiGLU), whatever the
backbone's family; ``init: backbone`` mirrors the backbone's (:func:`mlpmem.memory.init.init_from_backbone`).
The head may be tied to the backbone's output embedding (:func:`mlpmem.memory.init.tie_to_backbone`): then
it is frozen, shared with the backbone and never saved. It may also score only the corpus's tokens (a corpus
head, :mod:`mlpmem.memory.vocab`): its row ids ``vocab_ids`` are stored with the weights. Checkpoints
(``config.json`` + ``model.safetensors``) are written and read by :mod:`mlpmem.memory.io`, which the save/load
methods here delegate to.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import nn

from mlpmem.errors import ConfigError
from mlpmem.memory.blocks import MemoryBlock, RMSNorm, make_norm
from mlpmem.memory.config import MemoryConfig
from mlpmem.memory.io import load_memory, save_memory
from mlpmem.memory.vocab import check_vocab_ids


class MLPMemory(nn.Module):
    """Maps keys f(c_t) of shape (..., d) to next-token logits (..., V); p_mem = softmax(logits)."""

    def __init__(self, config: MemoryConfig):
        super().__init__()
        config.check_sized()
        self.config = config
        if config.width != config.input_size:
            self.in_proj = nn.Linear(config.input_size, config.width, bias=False)
        else:
            self.in_proj = nn.Identity()
        self.blocks = nn.ModuleList(MemoryBlock(config) for _ in range(config.depth))
        self.norm = make_norm(config.norm, config.width, config.norm_eps)
        self.head = nn.Linear(config.width, config.head_vocab_size or config.vocab_size, bias=False)
        if config.head_vocab_size is not None:  # a corpus head: the token id of each head row, set_head_vocab()
            self.register_buffer("vocab_ids", torch.arange(config.head_vocab_size, dtype=torch.int64))
        else:
            self.vocab_ids = None
        self._tied = False
        self.reset_parameters()
        if config.tie_head:  # placeholder until tie_to_backbone() shares the backbone's embedding
            self.head.weight.requires_grad_(False)

    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights, zero biases, unit norms; residual outputs scaled by 1/sqrt(2L)."""
        std = self.config.init_std
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                scale = 1.0 / math.sqrt(2 * self.config.depth) if name.endswith(("down_proj", "c_proj")) else 1.0
                nn.init.normal_(module.weight, mean=0.0, std=std * scale)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (RMSNorm, nn.LayerNorm)):
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def features(self, keys: torch.Tensor) -> torch.Tensor:
        """The final-normed hidden state before the head: (..., d) -> (..., H)."""
        x = self.in_proj(keys.to(self.norm.weight.dtype))  # (..., H)
        for block in self.blocks:
            x = block(x)  # (..., H)
        return self.norm(x)  # (..., H)

    def forward(self, keys: torch.Tensor, head: bool = True, full_vocab: bool = True) -> torch.Tensor:
        """Next-token logits (..., V) of p_mem for keys (..., d); a corpus head's are -inf outside its tokens
        (see :meth:`to_vocab`), or with ``full_vocab=False`` its own rows' logits (..., V'). With ``head=False``
        the features (..., H), what a fused head + loss takes. Training calls go through ``forward`` so that a
        DDP or FSDP wrapper sees them."""
        if self.config.tie_head and not self._tied:
            raise ConfigError("this memory has tie_head=True: call tie_to_backbone(memory, backbone) first")
        x = self.features(keys)  # (..., H)
        if not head:
            return x
        logits = self.head(x.to(self.head.weight.dtype))  # (..., V')
        return self.to_vocab(logits) if full_vocab else logits

    def set_head_vocab(self, vocab_ids: torch.Tensor) -> None:
        """Set the token ids of a corpus head's rows (sorted, unique, ``head_vocab_size`` of them), before the
        head is initialised or tied (its rows are gathered from the backbone's embedding by these ids)."""
        if self.vocab_ids is None:
            raise ConfigError("this memory has a full-vocabulary head (head_vocab_size=None)")
        vocab_ids = torch.as_tensor(vocab_ids)
        if vocab_ids.is_floating_point() or vocab_ids.dtype == torch.bool:
            raise ConfigError(f"vocab_ids must be integer token ids, got {vocab_ids.dtype}")
        vocab_ids = vocab_ids.to(torch.int64)
        check_vocab_ids(vocab_ids, self.config.vocab_size)
        if vocab_ids.numel() != self.config.head_vocab_size:
            raise ConfigError(f"{vocab_ids.numel()} vocab_ids for a head of {self.config.head_vocab_size} tokens")
        self.vocab_ids.copy_(vocab_ids)

    def to_vocab(self, head_logits: torch.Tensor) -> torch.Tensor:
        """Head logits (..., V') as full-vocabulary logits (..., V): -inf (probability 0) outside a corpus head's
        tokens; a full head's logits are returned as they are."""
        if self.vocab_ids is None:
            return head_logits
        full = head_logits.new_full((*head_logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.vocab_ids, head_logits)  # (..., V)

    def cast_weights(self, dtype: torch.dtype) -> MLPMemory:
        """Store the memory's own weights in ``dtype`` (e.g. bf16 for inference), in place; a tied head is
        the backbone's tensor and keeps its dtype. Norms still normalise in fp32 (see RMSNorm); the head
        runs in the head's dtype. Halving the bytes of the blocks halves what they add to a decode step."""
        for module in (self.in_proj, self.blocks, self.norm):
            module.to(dtype)
        if not self._tied:
            self.head.to(dtype)
        return self

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Parameter count (a tied head counts as a parameter but not as trainable)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    # -- checkpoints

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write ``config.json`` + ``model.safetensors`` atomically (a tied head is not stored).

        The files are written to a sibling temporary folder which then replaces ``directory`` whole, so a
        crash never leaves a partial save where a good one was. ``directory`` must be new, empty or a
        previous memory save (it is replaced, so it must not hold other files).
        """
        return save_memory(self, directory)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        backbone_model: nn.Module | None = None,
        backbone_tokenizer=None,
    ) -> MLPMemory:
        """Load a save; verify the recorded backbone fingerprint against ``backbone_model`` if given.

        Without ``backbone_tokenizer`` the tokenizer part of the fingerprint is not checked. A tied head
        needs ``backbone_model``. Missing or corrupt files raise CorruptArtifact naming the file.
        """
        return load_memory(cls, directory, backbone_model, backbone_tokenizer)
