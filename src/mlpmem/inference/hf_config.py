"""Configuration of the memory-augmented model as a transformers model (``model_type`` ``"mlpmem"``).

:class:`MemoryAugmentedConfig` is the ``config.json`` of a folder written by
:meth:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM.save_pretrained`. It holds no weights: it says
which backbone to load (by reference: a shipped name, a hub name or a local folder, resolved like
:func:`mlpmem.backbone.load_backbone`; or the folder's own ``backbone/`` copy), the backbone's fingerprint
that the memory and the loaded backbone must match, the mixing weight λ, whether a learned gate replaces it,
and the memory's key layer and site. The backbone's context length and vocabulary are repeated here because
harnesses (lm-evaluation-harness, pipelines) read them from the model's config.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from mlpmem.backbone import SITES
from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import check_lambda

MODEL_TYPE = "mlpmem"
BACKBONE_COPY = "backbone"
"""The sub-folder holding the backbone when it is copied into the folder (``copy_backbone=True``)."""


class MemoryAugmentedConfig(PretrainedConfig):
    """A memory-augmented causal LM: a frozen backbone mixed with an MLP Memory, p = (1 - λ) p_LM + λ p_mem.

    Args:
        backbone (str | None, None): the backbone by reference (shipped name, hub name or absolute folder);
            ignored when ``backbone_copied`` (the folder's ``backbone/`` is loaded).
        backbone_copied (bool, False): the backbone was saved inside the folder.
        backbone_fingerprint (dict | None, None): :func:`mlpmem.backbone.fingerprint` of the backbone the
            folder was saved with; a loaded backbone that differs is refused.
        lam (float, 0.5): the fixed mixing weight λ of p_mem, in [0, 1].
        gate (bool, False): a learned gate (the folder's ``gate/``) gives λ_t per position instead of ``lam``.
        key_layer (int | None, None): the backbone layer whose hidden states the memory reads.
        key_site (str, "ffn_input"): ``ffn_input`` or ``residual`` (see :mod:`mlpmem.backbone`).
        max_position_embeddings (int | None, None): the backbone's context length.
        vocab_size (int | None, None): the backbone's vocabulary size.
    """

    model_type = MODEL_TYPE

    def __init__(self, backbone: str | None = None, backbone_copied: bool = False,
                 backbone_fingerprint: dict | None = None, lam: float = 0.5, gate: bool = False,
                 key_layer: int | None = None, key_site: str = "ffn_input",
                 max_position_embeddings: int | None = None, vocab_size: int | None = None, **kwargs):
        self.backbone, self.backbone_copied = backbone, backbone_copied
        self.backbone_fingerprint = backbone_fingerprint
        self.lam, self.gate = check_lambda(lam, "lam"), gate
        self.key_layer, self.key_site = key_layer, key_site
        self.max_position_embeddings, self.vocab_size = max_position_embeddings, vocab_size
        self.validate()
        kwargs.setdefault("tie_word_embeddings", False)  # the backbone ties its own weights when it loads
        super().__init__(**kwargs)

    def validate(self) -> None:
        if self.backbone is not None and not isinstance(self.backbone, str):
            raise ConfigError(f"mlpmem config backbone must be a name or folder, got {self.backbone!r}")
        for name in ("backbone_copied", "gate"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"mlpmem config {name} must be a bool, got {getattr(self, name)!r}")
        if self.key_site not in SITES:
            raise ConfigError(f"mlpmem config key_site must be one of {SITES}, got {self.key_site!r}")
        if self.key_layer is not None and (isinstance(self.key_layer, bool) or not isinstance(self.key_layer, int)):
            raise ConfigError(f"mlpmem config key_layer must be an int, got {self.key_layer!r}")
        if self.backbone_fingerprint is not None and not isinstance(self.backbone_fingerprint, dict):
            raise ConfigError("mlpmem config backbone_fingerprint must be a mapping")
