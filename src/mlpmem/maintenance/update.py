"""``mlpmem update RUN --add DOCS``: new documents join a finished run without rebuilding it.

1. Documents the run already holds (same text, same id) are skipped and counted; nothing new: nothing changes.
2. The new documents' keys are extracted by the run's backbone, layer, site, windows and precision into a staged
   keystore (:func:`mlpmem.datastore.build_keystore`, resumable), whose shards become new datastore shards.
3. Their teacher targets are searched against the whole grown datastore (self excluded), with the teacher's own
   k, T, top-K and index; with ``update.refresh`` the old positions' targets are recomputed too.
4. The memory (its corpus head widened to the new tokens) is fine-tuned on the new positions mixed with a replay
   sample of old ones (``update.replay_ratio`` per new position) under the run's α; with ``update.replay_targets:
   memory`` the replayed positions are taught the memory's own distribution from before the update instead.
5. Everything is committed at once (:mod:`mlpmem.maintenance.transaction`): until then the run is the previous
   one, and a rerun of the same command resumes the staged work.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mlpmem.corpora.documents import Document, encode_documents
from mlpmem.datastore import KeyStore
from mlpmem.maintenance.config import MaintenanceConfig
from mlpmem.maintenance.documents import NewDocument, check_new_names, entry, read_new_documents
from mlpmem.maintenance.finetune import (
    TuneSet,
    load_memory,
    replay_rows,
    save_staged_memory,
    tune,
    widen_head,
)
from mlpmem.maintenance.ledger import next_seq, operation
from mlpmem.maintenance.operation import (
    Operation,
    commit,
    open_operation,
    relative_text,
    renamed,
    reteach,
    run_keys,
    shard_moves,
    staged_text,
    teacher_arrays,
    texts_folder,
    unreferenced,
)
from mlpmem.maintenance.shards import (
    Shard,
    ShardView,
    allocate,
    save_shard,
    staged_paths,
    staged_shard,
    used_numbers,
    with_shards,
)
from mlpmem.maintenance.targets import fold_label, memory_rows, pure_label
from mlpmem.memory import MLPMemory
from mlpmem.pipeline.run import Run
from mlpmem.teacher import teacher_rows_at
from mlpmem.utils.runtime import set_threads

COMMAND = "mlpmem update RUN"


def new_documents(docs: list[NewDocument], held: set[str]) -> tuple[list[NewDocument], int]:
    """The documents not held yet (the first of repeated texts); how many were skipped."""
    seen, fresh = set(held), []
    for doc in docs:
        if doc.id not in seen:
            seen.add(doc.id)
            fresh.append(doc)
    return fresh, len(docs) - len(fresh)


def update_run(run: Run, docs_path: str | Path, cfg: MaintenanceConfig, abort: bool = False) -> dict:
    """Add the documents of ``docs_path`` to ``run`` (see the module docstring); a summary of what was done."""
    set_threads()
    with run.locked():
        op = open_operation(run)
        if abort:
            return {"discarded": op.pending.discard()}
        t0 = time.perf_counter()
        fresh, skipped = new_documents(read_new_documents(docs_path), op.held.ids())
        check_new_names(fresh, op.held)
        if not fresh:
            return {"added": 0, "skipped": skipped, "rows_added": 0, "changed": False}
        seq = next_seq(op.ledger)
        plan = {"kind": "update", "seq": seq, "datastore": op.ledger["datastore"],
                "documents": [d.id for d in fresh], "config": cfg.update.to_dict(), "seed": cfg.seed}
        resumed = op.pending.start(plan, COMMAND)
        summary = _update(op, fresh, cfg, seq, f"update-{seq}-{plan['documents'][0]}")
        entry_ = operation("update", seq, plan["documents"], {**summary["counts"], "skipped": skipped},
                           time.perf_counter() - t0, summary["memory_sha"], source=str(docs_path),
                           config=plan["config"])
        commit(op, summary["datastore"], summary["teacher"], summary["documents"], entry_, summary["moves"],
               summary["deletes"])
    return {"added": len(fresh), "skipped": skipped, "resumed": resumed, "changed": True, "seq": seq,
            "seconds": time.perf_counter() - t0, **summary["counts"]}


def _update(op: Operation, fresh: list[NewDocument], cfg: MaintenanceConfig, seq: int, plan_id: str) -> dict:
    tokens = list(encode_documents([Document(d.id, d.text) for d in fresh], op.run.backbone[1]))
    added = run_keys(op.run, tokens, op.pending.path("keys"), "keys (new documents)")
    old_ds, new_ds, view, teacher, refreshed = _grown(op, added, cfg.update.refresh, seq)
    memory_sha, tune_state = _tune(op, view, teacher, len(old_ds), cfg, seq, plan_id)
    texts = staged_text(op, [{"id": d.id, "text": d.text} for d in fresh])
    text_file = texts_folder(op) / f"op-{seq:04d}.jsonl"
    documents = op.ledger["documents"] + [entry(d, len(t), seq, relative_text(text_file, op))
                                          for d, t in zip(fresh, tokens)]
    counts = {"documents": len(fresh), "rows_added": added.num_rows, "shards_added": len(new_ds),
              "teacher_shards_refreshed": len(refreshed), "tune_rows": tune_state["rows"],
              "tune_steps": tune_state["step"]}
    return {"datastore": with_shards(op.store.manifest, [s.record for s in old_ds + new_ds]),
            "teacher": with_shards(op.teacher.manifest, [t.record for t in teacher]), "documents": documents,
            "counts": counts, "memory_sha": memory_sha,
            "moves": [*shard_moves(new_ds, op.store.path), *shard_moves(teacher, op.teacher.path),
                      (texts, text_file)],
            "deletes": unreferenced(op.teacher.path, op.teacher.manifest, teacher)}


def _grown(op: Operation, added: KeyStore, refresh: bool, seq: int):
    """The datastore with the new documents' shards appended (its old shards, the new ones, a view of all) and
    the teacher with their targets (old positions recomputed with ``refresh``; which ones changed)."""
    old_ds = op.live_datastore()
    used = used_numbers([op.store.path, op.teacher.path], [op.store.manifest, op.teacher.manifest])
    numbers = allocate(len(added.manifest["shards"]) + (len(old_ds) if refresh else 0), used)
    new_ds = [Shard(renamed(r, n), {f: added.path / e["name"] for f, e in r["files"].items()})
              for r, n in zip(added.manifest["shards"], numbers)]
    view = ShardView(old_ds + new_ds, op.store.hidden_size, f"datastore of {op.run.dir} with the new documents")
    index = op.search.index_over(view)
    new_teacher = _new_targets(op, index, view, len(old_ds), numbers, seq)
    teacher, refreshed = op.live_teacher(), {}
    if refresh:
        refreshed = reteach(op, index, view, list(range(len(old_ds))), numbers[len(new_ds):], teacher, seq,
                            op.pending.path("refresh"))
    teacher = [refreshed.get(s, t) for s, t in enumerate(teacher)] + new_teacher
    return old_ds, new_ds, view, teacher, refreshed


def _new_targets(op: Operation, index, view: ShardView, first: int, numbers: list[int], seq: int) -> list[Shard]:
    """Teacher shards of the new datastore shards ``first:``, searched against the whole ``view`` (resumable)."""
    folder, out = op.pending.path("teacher"), []
    for s in range(first, len(view.shards)):
        number = numbers[s - first]
        record = staged_shard(folder, number)
        if record is None:
            rows = op.search.rows(index, view, s, op.run.progress, "teacher (new positions)")
            record = save_shard(folder, number, teacher_arrays(rows), {"computed": seq})
        out.append(Shard(record, staged_paths(folder, record)))
    return out


def _tune(op: Operation, view: ShardView, teacher: list[Shard], n_old_shards: int, cfg: MaintenanceConfig,
          seq: int, plan_id: str) -> tuple[str, dict]:
    """Fine-tune the memory on the new positions plus the replay sample; stage it; (its sha256, train state)."""
    run, folder = op.run, op.pending.path("tune")
    before = load_memory(run)
    memory = widen_head(before, np.unique(view.array("values")[int(view.offsets[n_old_shards]):]), run.backbone[0])
    rows = TuneSet.load(folder)
    if rows is None:
        rows = _tune_rows(view, teacher, n_old_shards, cfg, seq, before, run.cfg.train.alpha)
        rows.save(folder)
        rows = TuneSet.load(folder)
    folded = cfg.update.replay_targets == "memory"  # every row carries its own label: the loop runs at α = 1
    state = tune(run, memory, rows, cfg.update, 1.0 if folded else run.cfg.train.alpha, op.pending.path("train"),
                 plan_id, cfg.seed)
    return save_staged_memory(memory, op.pending.path("memory")), {**state, "rows": len(rows)}


def _tune_rows(view: ShardView, teacher: list[Shard], n_old_shards: int, cfg: MaintenanceConfig, seq: int,
               before: MLPMemory, alpha: float) -> TuneSet:
    """The new positions and a replay sample of old ones under their teacher rows, or (``replay_targets:
    memory``) the new positions' teacher rows folded with their tokens at ``alpha`` and the replayed ones under
    the memory ``before`` the update."""
    first_new = int(view.offsets[n_old_shards])
    new = np.arange(first_new, view.num_rows)
    replay, plan = replay_rows(np.arange(first_new), len(new), cfg.update, cfg.seed * 1009 + seq)
    targets = ShardView(teacher, 0, "teacher")
    keys, values = view.rows("keys"), view.rows("values")
    if cfg.update.replay_targets == "teacher":
        rows = np.concatenate([new, replay])
        return TuneSet(keys[rows], values[rows], *teacher_rows_at(targets, rows), plan=plan)
    taught = fold_label(teacher_rows_at(targets, new), values[new], alpha)
    kept = pure_label(memory_rows(before, keys[replay], targets.rows("ids").shape[1]))
    return TuneSet.concat([TuneSet(keys[new], values[new], *taught), TuneSet(keys[replay], values[replay], *kept)],
                          plan)
