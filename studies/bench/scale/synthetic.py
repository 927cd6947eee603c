"""Synthetic keystores in the real on-disk format, their teacher settings, and seeded training over them.

The memory and sharding measurements need datastores of chosen sizes without running a backbone: clustered
random fp16 keys stand in for the extracted keys.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mlpmem.datastore import FORMAT, KeyStore
from mlpmem.index import IndexConfig
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.teacher import TeacherConfig, TeacherStore, build_teacher
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData
from mlpmem.training.loop import train_memory
from mlpmem.utils.shards import MANIFEST, save_array, write_json


def synthetic_keystore(out: Path, rows: int, dim: int, vocab: int, shard_rows: int = 8192, seed: int = 0) -> Path:
    """A keystore of clustered random fp16 keys in the real on-disk format (for memory measurements)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(256, dim)).astype(np.float32)  # (256, dim)
    shards = []
    for index, start in enumerate(range(0, rows, shard_rows)):
        n = min(shard_rows, rows - start)
        cls = rng.integers(0, 256, n)
        keys = (centers[cls] + 0.3 * rng.normal(size=(n, dim))).astype(np.float16)  # (n, dim)
        values = (cls * (vocab // 256) + rng.integers(0, 2, n)).astype(np.int32)  # (n,)
        files = {"keys": save_array(out, f"keys-{index:05d}.npy", keys),
                 "values": save_array(out, f"values-{index:05d}.npy", values)}
        shards.append({"index": index, "windows": 0, "rows": n, "files": files})
    backbone = {"name": "synthetic", "model_type": "synthetic", "hidden_size": dim, "num_layers": 1,
                "vocab_size": vocab, "tokenizer_sha": "-", "weights_sha": f"seed{seed}"}
    write_json(out / MANIFEST, {"format": FORMAT, "backbone": backbone, "layer": 0, "site": "ffn_input",
                                "rows": rows, "shards": shards, "complete": True})
    return out


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
