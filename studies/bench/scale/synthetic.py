"""The teacher settings of the synthetic keystores (:func:`studies.bench.synthetic_keys.synthetic_keystore`) and
seeded training over them: the memory and sharding measurements need datastores of chosen sizes without running a
backbone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mlpmem.datastore import KeyStore
from mlpmem.index import IndexConfig
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.teacher import TeacherConfig, TeacherStore, build_teacher
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData
from mlpmem.training.loop import train_memory


def synthetic_teacher_config() -> TeacherConfig:
    """The teacher built over every synthetic store: IVF-PQ, so that its memory is the index's, not the keys'."""
    return TeacherConfig(k=32, temperature=10.0, top_k=8, query_batch=2048,
                         index=IndexConfig(kind="ivf_pq", nlist=256, nprobe=8, pq_bytes=32, train_size=20000,
                                           rerank=True))


def resume_teacher(store: str) -> None:
    """Build (or resume) the teacher of the synthetic store ``store`` next to it, never from scratch."""
    build_teacher(store, Path(store).parent / "teacher", synthetic_teacher_config(), progress=False)


def train_synthetic(store_dir: Path, out: Path, steps: int, in_ram: bool = False, width: int = 256, layers: int = 2,
                    batch_size: int = 512, sharding: str = "ddp") -> int:
    """``steps`` training steps of a seeded memory over a synthetic keystore and its teacher, rows read on demand
    from the shards (or, ``in_ram``, every field concatenated in RAM first); returns the memory's parameters."""
    store = KeyStore(store_dir)
    teacher = TeacherStore(store_dir.parent / "teacher", datastore=store)
    fetch = (lambda s, n: s.array(n)) if in_ram else (lambda s, n: s.rows(n))
    data = TrainData(fetch(store, "keys"), fetch(store, "values"), fetch(teacher, "ids"), fetch(teacher, "probs"),
                     fetch(teacher, "residual"))
    vocab = store.manifest["backbone"]["vocab_size"]
    val = EvalData(np.asarray(store.rows("keys")[:512]), np.asarray(store.rows("values")[:512]),
                   np.full(512, -np.log(vocab), np.float32))
    torch.manual_seed(0)
    memory = MLPMemory(MemoryConfig(input_size=store.hidden_size, vocab_size=vocab, intermediate_size=width,
                                    num_layers=layers, tie_head=False))
    cfg = TrainConfig(epochs=1, batch_size=batch_size, checkpoint_every=10**9, eval_lambdas=[0.0, 1.0],
                      lr=4e-4, precision="fp32", sharding=sharding)
    train_memory(memory, data, val, cfg, out, progress=False, stop_after=steps)
    return sum(p.numel() for p in memory.parameters())
