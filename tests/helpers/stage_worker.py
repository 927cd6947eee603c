"""Runs mlpmem stages on a tiny backbone in a separate process (under ``accelerate launch`` or plain python).

    python tests/helpers/stage_worker.py BACKBONE_DIR OUT_DIR STAGE[,STAGE...]

Stages: ``datastore`` (OUT/ds), ``teacher`` (OUT/teacher, exact or ``ivf`` index), ``train`` (OUT/train, then
OUT/memory); ``train-tied`` trains a memory whose head is the backbone's frozen embedding (OUT/train-tied, then
OUT/memory-tied); a ``-fsdp`` suffix trains either with ``sharding: fsdp`` into the same folders, a ``-select``
suffix evaluates every quarter epoch on a validation set that training makes worse, with early stopping, and
``MLPMEM_TEST_STOP_AFTER=n`` stops training after n steps.

``MLPMEM_TEST_KILL_AT=n`` SIGKILLs the process at its n-th rename (``os.replace``/``os.rename``: the commit point
of every atomic write), *before* doing it, so the temporary file is left behind as a real kill would leave it;
``MLPMEM_TEST_KILL_RANK`` restricts that to one rank. At the end the worker prints ``renames=<count>`` so a test
can draw a kill point among them.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MLPMEM_THREADS", "1")
os.environ.setdefault("MLPMEM_FSYNC", "0")  # a killed process keeps its page cache: fsync only guards power loss
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, home of the helpers package

import numpy as np  # noqa: E402
import torch  # noqa: E402

from helpers.corpus import corpus_text  # noqa: E402

KW = dict(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=2)
TRAIN = dict(epochs=2, batch_size=149, lr=3e-3, checkpoint_every=5, eval_lambdas=[0.0, 0.5, 1.0], alpha=0.4,
             precision="fp32")
RENAMES = [0]


def install_kill_switch() -> None:
    kill_at = int(os.environ.get("MLPMEM_TEST_KILL_AT", "0"))
    rank = os.environ.get("MLPMEM_TEST_KILL_RANK")
    if rank is not None and rank != os.environ.get("RANK", "0"):
        kill_at = 0

    def counted(real):
        def rename(*args, **kwargs):
            RENAMES[0] += 1
            if RENAMES[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return rename

    os.replace, os.rename = counted(os.replace), counted(os.rename)


def tiny_docs(tokenizer, n_docs: int = 4):
    from mlpmem.corpora.documents import Document, tokenize_documents

    return tokenize_documents([Document(str(i), t) for i, t in enumerate(corpus_text(n_docs))], tokenizer)


def teacher_config(kind: str = "exact"):
    from mlpmem.index import IndexConfig
    from mlpmem.teacher import TeacherConfig

    index = IndexConfig(kind="exact") if kind == "exact" else IndexConfig(kind="ivf_flat", nlist=4, nprobe=4,
                                                                           train_size=200)
    return TeacherConfig(k=8, temperature=2.0, top_k=4, query_batch=16, index=index)


def tiny_memory(store, backbone_dir: Path | None = None):
    """A 2-block memory; with ``backbone_dir``, its head tied to (and frozen as) the backbone's embedding."""
    from mlpmem.memory import MemoryConfig, MLPMemory, tie_to_backbone

    torch.manual_seed(0)
    vocab = int(store.manifest["backbone"]["vocab_size"])
    memory = MLPMemory(MemoryConfig(input_size=store.hidden_size, vocab_size=vocab, intermediate_size=16,
                                    num_layers=2, tie_head=backbone_dir is not None))
    if backbone_dir is not None:
        from transformers import AutoModelForCausalLM

        tie_to_backbone(memory, AutoModelForCausalLM.from_pretrained(backbone_dir))
    return memory


def train_stage(stage: str, backbone_dir: Path, out: Path) -> None:
    """``train``, ``train-tied``, each optionally ``-fsdp``: see the module docstring."""
    from mlpmem.datastore import KeyStore
    from mlpmem.teacher import TeacherStore
    from mlpmem.training.config import TrainConfig
    from mlpmem.training.data import EvalData, TrainData
    from mlpmem.training.loop import train_memory

    flags = stage.split("-")[1:]
    suffix = "-tied" if "tied" in flags else ""
    store = KeyStore(out / "ds")
    teacher = TeacherStore(out / "teacher", datastore=store)
    data = TrainData(store.rows("keys"), store.rows("values"), teacher.rows("ids"), teacher.rows("probs"),
                     teacher.rows("residual"))
    n = min(100, store.num_rows)
    vocab = store.manifest["backbone"]["vocab_size"]
    targets = store.array("values")[:n]
    if "select" in flags:  # the rarest next token of training everywhere: validation gets worse
        targets = np.full(n, np.bincount(store.array("values"), minlength=vocab).argmin(), targets.dtype)
    val = EvalData(store.array("keys")[:n], targets, np.full(n, -np.log(vocab), np.float32))
    memory = tiny_memory(store, backbone_dir if suffix else None)
    select = dict(eval_every=0.25, patience=2, eval_lambdas=[0.5, 1.0]) if "select" in flags else {}
    cfg = TrainConfig(**{**TRAIN, **select}, sharding="fsdp" if "fsdp" in flags else "ddp")
    stop = int(os.environ.get("MLPMEM_TEST_STOP_AFTER", "0")) or None
    train_memory(memory, data, val, cfg, out / f"train{suffix}", progress=False, stop_after=stop)
    if int(os.environ.get("RANK", "0")) == 0:
        memory.save_pretrained(out / f"memory{suffix}")


def run_stage(stage: str, backbone_dir: Path, out: Path, dist=None) -> None:
    from mlpmem.datastore import KeystoreConfig, build_keystore
    from mlpmem.teacher import build_teacher

    if stage == "datastore":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(backbone_dir)
        model = AutoModelForCausalLM.from_pretrained(backbone_dir).eval()
        build_keystore(KeystoreConfig(**KW), model, tokenizer, tiny_docs(tokenizer), out / "ds", dist=dist,
                       progress=False)
    elif stage in ("teacher", "teacher-ivf"):
        build_teacher(out / "ds", out / "teacher", teacher_config("ivf" if stage == "teacher-ivf" else "exact"),
                      progress=False, dist=dist)
    elif stage.split("-")[0] == "train":
        train_stage(stage, backbone_dir, out)
    else:
        raise SystemExit(f"unknown stage {stage}")


def main() -> None:
    from studies.bench.scale.workers import match_launcher_priority

    match_launcher_priority()  # torchrun's workers start a new session: keep the launcher's CPU weight
    torch.set_num_threads(1)
    install_kill_switch()
    backbone_dir, out, stages = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
    for stage in stages:
        run_stage(stage, backbone_dir, out)
    print(f"renames={RENAMES[0]}")


if __name__ == "__main__":
    main()
