"""Training the memory: the sparse hybrid KL/CE loss, the optimizer, checkpoints, sharding, the loop.

One concept a module: ``config`` (the ``train:`` section), ``loss``, ``data`` (rows, order, validation
evaluation), ``optim`` (AdamW and its schedule), ``checkpoint`` (safetensors + JSON), ``sharding`` (FSDP2),
``loop`` (:func:`train_memory`).
"""

from mlpmem.training.checkpoint import load_checkpoint, save_checkpoint
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData, evaluate, memory_logprobs
from mlpmem.training.loop import train_memory
from mlpmem.training.loss import sparse_hybrid_loss
from mlpmem.training.optim import adamw, lr_at

__all__ = ["EvalData", "TrainConfig", "TrainData", "adamw", "evaluate", "load_checkpoint", "lr_at",
           "memory_logprobs", "save_checkpoint", "sparse_hybrid_loss", "train_memory"]
