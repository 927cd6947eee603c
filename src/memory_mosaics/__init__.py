"""Memory Mosaics v2 (Zhang & Bottou, NeurIPS 2025) and its matched Llama-style Transformer."""

# Loadable by path with the Auto classes (``mlpmem.backbone.load_backbone``), like any causal LM.
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from mlpmem.mosaics.config import MosaicsConfig
from mlpmem.mosaics.model import MosaicsForCausalLM, MosaicsModel

AutoConfig.register(MosaicsConfig.model_type, MosaicsConfig, exist_ok=True)
AutoModelForCausalLM.register(MosaicsConfig, MosaicsForCausalLM, exist_ok=True)

__all__ = ["MosaicsConfig", "MosaicsForCausalLM", "MosaicsModel"]
