"""Stage 5, the memory: trained on the datastore keys against the teacher."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch

from mlpmem.compute import model_device, resolve_precision
from mlpmem.datastore import KeyStore
from mlpmem.layout import RunLayout, is_train_written
from mlpmem.memory import MLPMemory, init_from_backbone, size_for_backbone, tie_to_backbone
from mlpmem.memory.sizing import init_start
from mlpmem.memory.vocab import corpus_vocabulary, index_of
from mlpmem.pipeline.run import Run
from mlpmem.reporting.curves import write_learning_curve
from mlpmem.teacher import TeacherStore
from mlpmem.training.data import EvalData, TrainData
from mlpmem.training.loop import train_memory
from mlpmem.training.selection import tokens_seen
from mlpmem.utils.io import remove_written
from mlpmem.utils.runtime import set_threads


def build_memory(run: Run, head_vocab: np.ndarray | None = None):
    """A fresh memory for this run's backbone and key layer/site, shaped and initialised by the ``memory:``
    section (seeded by ``train.seed``); ``head_vocab`` (sorted token ids) gives a corpus head its tokens."""
    cfg, (model, tokenizer) = run.cfg, run.backbone
    torch.manual_seed(cfg.train.seed)
    mcfg = size_for_backbone(cfg.memory, model, tokenizer, cfg.backbone.layer, cfg.backbone.site,
                             None if head_vocab is None else len(head_vocab))
    memory = MLPMemory(mcfg)  # initialised on the CPU: the same seeded weights whatever the device
    if head_vocab is not None:
        memory.set_head_vocab(torch.from_numpy(head_vocab))
    memory.to(model_device(model))
    if mcfg.init == "backbone":  # the blocks start as the backbone's just above the key layer
        init_from_backbone(memory, model, init_start(model, mcfg.key_layer))
    if mcfg.tie_head:
        tie_to_backbone(memory, model)
    return memory


def head_vocabulary(vocab: str, store: KeyStore, teacher: TeacherStore, vocab_size: int) -> np.ndarray | None:
    """The tokens of a ``memory.vocab: corpus`` head: every next token of the datastore and every teacher
    support, read shard by shard; None for ``full``."""
    if vocab == "full":
        return None
    shards = (rows for field in (store.rows("values"), teacher.rows("ids")) for _, rows in field.chunks())
    return corpus_vocabulary(shards, vocab_size)


def eval_data(run: Run, split: str):
    store = KeyStore(run.layout.keystore(split))
    return EvalData(store.array("keys"), store.array("values"), store.array("lm"))


def train_data(run: Run) -> tuple[TrainData, np.ndarray | None]:
    """The training rows of a run (datastore keys and next tokens, the sparse teacher) and its head vocabulary
    (None for a full head); rows are read from the memory-mapped shards batch by batch, so memory stays bounded for
    any datastore size."""
    store = KeyStore(run.layout.datastore)
    store.check_backbone(*run.backbone)
    teacher = TeacherStore(run.layout.teacher, datastore=store)
    vocab_size = int(run.backbone[0].get_output_embeddings().weight.shape[0])
    head_vocab = head_vocabulary(run.cfg.memory.vocab, store, teacher, vocab_size)
    data = TrainData(store.rows("keys"), store.rows("values"), teacher.rows("ids"), teacher.rows("probs"),
                     teacher.rows("residual"), None if head_vocab is None else index_of(head_vocab, vocab_size))
    return data, head_vocab


def stage_train(run: Run, rebuild: bool = False, out: Path | None = None) -> dict:
    """Train the memory on the datastore keys and the sparse teacher; save it to ``out/memory`` and its
    learning curve to ``out/learning_curve.png``.

    ``out`` defaults to the run folder (ablations train variants into sub-folders of it).
    """
    set_threads()
    out = run.path(os.path.relpath(out, run.dir)) if out is not None else run.dir  # never outside the run
    layout = RunLayout(out)  # the run's own, or an ablation variant's train/ and memory/
    if rebuild and run.is_main:
        remove_written(layout.train, is_train_written)
    data, head_vocab = train_data(run)
    memory = build_memory(run, head_vocab)
    state = train_memory(memory, data, eval_data(run, "validation"), run.cfg.train, layout.train, run.progress,
                         memory_spec=run.cfg.memory.to_dict())
    state["memory_parameters"] = memory.num_parameters()
    state["memory_trainable_parameters"] = memory.num_parameters(trainable_only=True)
    if run.is_main:
        memory.save_pretrained(layout.memory)
        write_learning_curve(state, layout.learning_curve, run.layout.knnlm_results)
    if out == run.dir:
        steps_per_epoch = math.ceil(len(data.targets) / run.cfg.train.batch_size)  # fewer steps if stopped early
        tokens = tokens_seen(state["step"], steps_per_epoch, run.cfg.train.batch_size, len(data.targets))
        run.record_timing("train", tokens=tokens, seconds=state["train_seconds"], tokens_per_s=state["tokens_per_s"],
                          precision=resolve_precision(run.cfg.train.precision, memory.head.weight.device))
    return state
