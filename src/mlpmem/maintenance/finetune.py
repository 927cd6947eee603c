"""Fine-tuning the run's memory after an operation: the changed positions mixed with a replay sample of the rest.

The rows to train on (:class:`TuneSet`: keys, next tokens, sparse targets) are staged once in the operation's
folder, so a resumed operation trains on exactly the rows it started with; the training itself is the project's
loop (:func:`mlpmem.training.loop.train_memory`), started from the run's memory and checkpointed in the staging
folder, under the run's ``train:`` settings with the operation's epochs, learning rate, batch and warmup. A
corpus head that does not cover the new documents' tokens is first widened (:func:`widen_head`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlpmem.compute import model_device
from mlpmem.datastore import KeyStore
from mlpmem.errors import CorruptArtifact
from mlpmem.maintenance.config import TuneConfig
from mlpmem.memory import MemoryConfig, MLPMemory, tie_to_backbone
from mlpmem.memory.vocab import index_of
from mlpmem.pipeline.records import record_memory
from mlpmem.pipeline.run import Run
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EpochRows, EvalData, TrainData
from mlpmem.training.loop import train_memory
from mlpmem.utils.shards import load_array, read_json, save_array, write_json

FIELDS = ("keys", "targets", "ids", "probs", "residual")
DTYPES = {"keys": np.float16, "targets": np.int32, "ids": np.int32, "probs": np.float16, "residual": np.float32}
TUNE_SET = "tune_set.json"


def replay_sample(candidates: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` rows drawn uniformly without replacement from ``candidates`` (all of them if fewer), sorted."""
    count = min(int(count), len(candidates))
    if count == 0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(np.asarray(candidates, np.int64), size=count, replace=False))


def replay_rows(candidates: np.ndarray, changed: int, cfg: TuneConfig,
                seed: int) -> tuple[np.ndarray, EpochRows | None]:
    """The old rows to stage after ``changed`` changed positions, and which staged rows each epoch visits: all of
    them (``replay_draw: once``, one sample every epoch: None) or the changed ones and a fresh share of a larger
    sample (``epoch``)."""
    per_epoch = round(cfg.replay_ratio * changed)
    if cfg.replay_draw == "once":
        return replay_sample(candidates, per_epoch, seed), None
    return replay_sample(candidates, per_epoch * cfg.epochs, seed), EpochRows(changed, per_epoch)


@dataclass
class TuneSet:
    """The rows an operation fine-tunes on: keys (n, d), next tokens (n,), sparse targets (n, K)."""

    keys: np.ndarray
    targets: np.ndarray
    ids: np.ndarray
    probs: np.ndarray
    residual: np.ndarray
    plan: EpochRows | None = None
    """Which rows each epoch visits; None: all of them."""

    def __len__(self) -> int:
        return len(self.targets)

    @classmethod
    def concat(cls, parts: list[TuneSet], plan: EpochRows | None = None) -> TuneSet:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS), plan=plan)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        files = {f: save_array(folder, f"tune-{f}.npy", getattr(self, f).astype(DTYPES[f])) for f in FIELDS}
        plan = None if self.plan is None else dataclasses.asdict(self.plan)
        write_json(folder / TUNE_SET, {"rows": len(self), "files": files, "plan": plan})

    @classmethod
    def load(cls, folder: Path) -> TuneSet | None:
        """The staged set, memory-mapped, or None when none was completed (or it fails its checksums)."""
        if not (folder / TUNE_SET).is_file():
            return None
        record = read_json(folder / TUNE_SET, "staged fine-tuning rows")
        plan = None if record.get("plan") is None else EpochRows(**record["plan"])
        try:
            return cls(*(load_array(folder, record["files"][f], True, "staged fine-tuning rows") for f in FIELDS),
                       plan=plan)
        except CorruptArtifact:
            return None


def widen_head(memory: MLPMemory, tokens: np.ndarray, model) -> MLPMemory:
    """``memory`` with a corpus head that also scores ``tokens`` (new documents' next tokens): a new memory with the
    same blocks, its head rows kept for the tokens it had, new rows from the backbone's tied embedding or, untied,
    drawn like a fresh head's. A full head, or one that covers them already, is returned as it is."""
    if memory.vocab_ids is None:
        return memory
    old = memory.vocab_ids.cpu().numpy()
    union = np.union1d(old, np.asarray(tokens, np.int64)).astype(np.int64)
    if len(union) == len(old):
        return memory
    config = MemoryConfig.from_dict({**memory.config.to_dict(), "head_vocab_size": len(union)})
    torch.manual_seed(0)
    device = model_device(memory)
    wider = MLPMemory(config).to(device)
    state = {k: v for k, v in memory.state_dict().items() if k not in ("head.weight", "vocab_ids")}
    wider.load_state_dict(state, strict=False)
    wider.set_head_vocab(torch.from_numpy(union).to(device))
    if config.tie_head:
        return tie_to_backbone(wider, model)
    with torch.no_grad():
        wider.head.weight[torch.from_numpy(np.searchsorted(union, old)).to(device)] = memory.head.weight.detach()
    return wider


def tune_config(run: Run, cfg: TuneConfig, alpha: float, seed: int = 0) -> TrainConfig:
    """The run's ``train:`` settings with the operation's epochs, lr, batch and warmup, no early stop (the last
    weights are kept), the given ``alpha``, and ``seed`` (the maintenance seed) added to the run's seed."""
    return dataclasses.replace(run.cfg.train, alpha=alpha, epochs=cfg.epochs, lr=cfg.lr,
                               seed=run.cfg.train.seed + seed, batch_size=cfg.batch_size or run.cfg.train.batch_size,
                               warmup_fraction=cfg.warmup_fraction, warmup_steps=None, eval_every=None,
                               patience=None, restore_best=False)


def validation_data(run: Run) -> EvalData:
    store = KeyStore(run.layout.keystore("validation"))
    return EvalData(store.array("keys"), store.array("values"), store.array("lm"))


def tune(run: Run, memory: MLPMemory, rows: TuneSet, cfg: TuneConfig, alpha: float, out_dir: Path,
         plan_id: str, seed: int = 0) -> dict:
    """Fine-tune ``memory`` in place on ``rows`` (resumes from the checkpoint in ``out_dir``); the trainer state.
    ``seed`` (the maintenance seed) moves the order of the rows, their epochs' replay shares and the dropout."""
    vocab_size = int(memory.config.vocab_size)
    head_index = None if memory.vocab_ids is None else index_of(memory.vocab_ids.cpu().numpy(), vocab_size)
    data = TrainData(rows.keys, rows.targets, rows.ids, rows.probs, rows.residual, head_index, rows.plan)
    spec = {"operation": plan_id, **run.cfg.memory.to_dict()}
    return train_memory(memory, data, validation_data(run), tune_config(run, cfg, alpha, seed), out_dir,
                        run.progress, memory_spec=spec)


def save_staged_memory(memory: MLPMemory, folder: Path) -> str:
    """Save the fine-tuned memory to ``folder`` and record its checksums beside it (``<folder>.sha256.json``);
    the sha256 of its weights."""
    memory.save_pretrained(folder)
    return record_memory(folder)["model.safetensors"]


def load_memory(run: Run) -> MLPMemory:
    model, tokenizer = run.backbone
    return MLPMemory.from_pretrained(run.layout.memory, backbone_model=model, backbone_tokenizer=tokenizer)
