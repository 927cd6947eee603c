"""Memory Mosaics v2 (Zhang & Bottou, NeurIPS 2025) and its matched Llama-style Transformer."""

from mlpmem.mosaics.config import MosaicsConfig
from mlpmem.mosaics.model import MosaicsForCausalLM, MosaicsModel

__all__ = ["MosaicsConfig", "MosaicsForCausalLM", "MosaicsModel"]
