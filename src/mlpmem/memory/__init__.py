"""The MLP memory: an attention-free stack of feed-forward blocks from a key to next-token logits.

One concept a module, imported in one direction (no cycles):
  - ``config``: :class:`MemoryConfig`, the ``memory:`` section and a save's ``config.json``;
  - ``blocks``: the block x + FFN(Norm(x)) and its parts (the memory's own activation and norm);
  - ``sizing``: what the memory reads from its backbone (:func:`size_for_backbone`; the mirrored blocks of
    ``init: backbone``);
  - ``init``: the memory and its backbone (copy its blocks and final norm in, tie its head);
  - ``io``: checkpoints, ``config.json`` + ``model.safetensors``;
  - ``vocab``: the corpus-vocabulary head (which tokens it scores, coverage-aware perplexity);
  - ``model``: :class:`MLPMemory` (its save/load methods delegate to ``io``).
"""

from mlpmem.memory.config import MemoryConfig
from mlpmem.memory.init import init_from_backbone, tie_to_backbone
from mlpmem.memory.model import MLPMemory
from mlpmem.memory.sizing import size_for_backbone

__all__ = ["MemoryConfig", "MLPMemory", "init_from_backbone", "size_for_backbone", "tie_to_backbone"]
