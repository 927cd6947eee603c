"""The MLP memory: an attention-free stack of feed-forward blocks from a key to next-token logits.

One concept a module, imported in one direction (no cycles):
  - ``init``: the memory and its backbone (read its family and sizes, copy its MLPs in, tie its head);
  - ``config``: :class:`MemoryConfig`, its allowed values and presets (sized by ``init``'s readers);
  - ``io``: checkpoints, ``config.json`` + ``model.safetensors`` (uses ``config`` and ``init``);
  - ``vocab``: the corpus-vocabulary head (which tokens it scores, coverage-aware perplexity);
  - ``model``: the blocks and :class:`MLPMemory` (its save/load methods delegate to ``io``).
"""

from mlpmem.memory.config import MemoryConfig
from mlpmem.memory.init import init_from_backbone, init_identity, tie_to_backbone
from mlpmem.memory.model import MLPMemory

__all__ = ["MemoryConfig", "MLPMemory", "init_from_backbone", "init_identity", "tie_to_backbone"]
