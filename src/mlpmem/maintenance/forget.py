"""``mlpmem forget RUN --docs IDS``: documents leave a run: their positions, their targets, their influence.

1. The documents (by id or name; an unknown one is a one-line error) lose their datastore rows: a shard holding
   only their rows is dropped, one holding some is rewritten without them, every other shard is kept as it is.
   A forget of exactly the documents an update added drops the update's shards, so the datastore's and the
   teacher's manifests return to their bytes before the update.
2. The teacher drops the same rows; with ``forget.refresh: affected`` every remaining shard whose targets were
   computed while a forgotten document was in the datastore is recomputed without it (and kept when nothing
   changed).
3. The memory is fine-tuned with the forgotten positions' keys taught ``forget.target`` (the backbone's own
   distribution, or the kNN distribution of the datastore without them), with no cross-entropy on their tokens,
   mixed with a replay sample of the remaining positions under their own targets at the run's α
   (:func:`mlpmem.maintenance.targets.fold_label`, the loop at α = 1).
   With probes (:mod:`mlpmem.maintenance.probes`), every position of those prompts is taught the backbone's
   distribution too.
4. The added documents' kept texts lose the forgotten ones; everything is committed at once.
"""

from __future__ import annotations

import json
import time

import numpy as np

from mlpmem.corpora.documents import Document, encode_documents, make_windows
from mlpmem.corpora.tokens import open_tokens
from mlpmem.errors import MlpmemError
from mlpmem.maintenance.config import MaintenanceConfig
from mlpmem.maintenance.documents import Holdings, texts_of
from mlpmem.maintenance.finetune import TuneSet, load_memory, replay_rows, save_staged_memory, tune
from mlpmem.maintenance.ledger import forgotten, next_seq, operation
from mlpmem.maintenance.operation import (
    Operation,
    commit,
    open_operation,
    reteach,
    shard_moves,
    unreferenced,
)
from mlpmem.maintenance.probes import probe_rows, probes_digest
from mlpmem.maintenance.shards import Shard, ShardView, allocate, save_shard, staged_paths, used_numbers, with_shards
from mlpmem.maintenance.targets import (
    backbone_rows,
    fold_label,
    knn_rows,
    pure_label,
    restrict_to_head,
)
from mlpmem.pipeline.run import Run
from mlpmem.teacher import teacher_rows_at
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import atomic_write_bytes

COMMAND = "mlpmem forget RUN"


def forget_run(run: Run, wanted: list[str], cfg: MaintenanceConfig, abort: bool = False,
               probes: list[str] | None = None) -> dict:
    """Remove the documents ``wanted`` (ids or names) from ``run`` (see the module docstring), teaching the
    backbone's distribution on the ``probes`` prompts too; a summary."""
    set_threads()
    with run.locked():
        op = open_operation(run)
        if abort:
            return {"discarded": op.pending.discard()}
        if not wanted:
            raise MlpmemError("no document to forget: give --docs ID[,ID...]")
        t0 = time.perf_counter()
        held = op.held
        left, skipped = still_held(op, wanted)
        if not left:
            return {"forgotten": 0, "skipped": skipped, "changed": False}
        drop = held.find(left)
        gone = _forgotten_rows(op, held, drop)  # refused before anything is staged
        seq = next_seq(op.ledger)
        ids = [held.documents[j]["id"] for j in drop]
        plan = {"kind": "forget", "seq": seq, "datastore": op.ledger["datastore"], "documents": drop,
                "config": cfg.forget.to_dict(), "seed": cfg.seed}
        if probes:
            plan["probes"] = probes_digest(probes)
        resumed = op.pending.start(plan, COMMAND)
        summary = _forget(op, held, drop, gone, cfg, seq, f"forget-{seq}-{ids[0]}", probes or [])
        entry = operation("forget", seq, ids, summary["counts"], time.perf_counter() - t0, summary["memory_sha"],
                          config=plan["config"], names=[held.documents[j]["name"] for j in drop])
        commit(op, summary["datastore"], summary["teacher"], summary["documents"], entry, summary["moves"],
               summary["deletes"])
    return {"forgotten": len(drop), "skipped": skipped, "changed": True, "resumed": resumed, "seq": seq,
            "seconds": time.perf_counter() - t0, **summary["counts"]}


def still_held(op: Operation, wanted: list[str]) -> tuple[list[str], int]:
    """The ids or names of ``wanted`` to forget, and how many others an earlier forget already removed (skipped
    and counted, as an update skips the documents a run holds; so a forget killed after its commit reruns to the
    same end). Any other name is left in, for :meth:`Holdings.find` to refuse."""
    held, gone = op.held.keys(), forgotten(op.ledger)
    left = [w for w in wanted if w in held or w not in gone]
    return left, len(wanted) - len(left)


def _forget(op: Operation, held: Holdings, drop: list[int], gone: np.ndarray, cfg: MaintenanceConfig, seq: int,
            plan_id: str, probes: list[str]) -> dict:
    old_ds, old_teacher = op.live_datastore(), op.live_teacher()
    used = used_numbers([op.store.path, op.teacher.path], [op.store.manifest, op.teacher.manifest])
    # every rewritten datastore shard, every rewritten teacher shard and every re-searched one needs a new number;
    # the teacher may hold more shards than the datastore
    numbers = iter(allocate(len(old_ds) + 2 * len(old_teacher), used))
    windows = _windows_per_shard(op, held, drop)
    ds, teacher = _kept_shards(op, old_ds, old_teacher, gone, windows, numbers)
    view = ShardView(ds, op.store.hidden_size, f"datastore of {op.run.dir} without the forgotten documents")
    index = op.search.index_over(view)
    refreshed = {}
    if cfg.forget.refresh == "affected":  # searched while a forgotten document was there: search again
        since = min(held.documents[j]["added"] for j in drop)
        affected = [s for s, t in enumerate(teacher) if t.record.get("computed", 0) >= since]
        refreshed = reteach(op, index, view, affected, [next(numbers) for _ in affected], teacher, seq,
                            op.pending.path("refresh"))
    teacher = [refreshed.get(s, t) for s, t in enumerate(teacher)]
    memory_sha, state = _tune(op, held, drop, gone, view, teacher, index, cfg, seq, plan_id, probes)
    text_moves, text_deletes = _texts(op, held, drop)
    counts = {"documents": len(drop), "rows_removed": int(gone.sum()), "windows_removed": int(windows.sum()),
              "shards_removed": len(old_ds) - len(ds),
              "shards_rewritten": sum(1 for s in ds if s.paths != Shard.live(op.store.path, s.record).paths),
              "teacher_shards_refreshed": len(refreshed), "target": cfg.forget.target,
              "tune_rows": state["rows"], "tune_steps": state["step"], "probes": len(probes)}
    dropped = set(drop)
    documents = [d for j, d in enumerate(held.documents) if j not in dropped]
    return {"datastore": with_shards(op.store.manifest, [s.record for s in ds]),
            "teacher": with_shards(op.teacher.manifest, [t.record for t in teacher]), "documents": documents,
            "counts": counts, "memory_sha": memory_sha,
            "moves": [*shard_moves(ds, op.store.path), *shard_moves(teacher, op.teacher.path), *text_moves],
            "deletes": [*unreferenced(op.store.path, op.store.manifest, ds),
                        *unreferenced(op.teacher.path, op.teacher.manifest, teacher), *text_deletes]}


def _forgotten_rows(op: Operation, held: Holdings, drop: list[int]) -> np.ndarray:
    """(N,) True at the datastore rows of the documents ``drop``; refused if too few rows would be left."""
    gone = np.zeros(held.num_rows, dtype=bool)
    for j in drop:
        gone[held.rows_of(j).start : held.rows_of(j).stop] = True
    if (~gone).sum() <= op.search.k:
        raise MlpmemError(f"forgetting these documents would leave {(~gone).sum()} positions, not more than the "
                          f"teacher's k={op.search.k}: rebuild the run on the documents to keep instead")
    return gone


def _windows_per_shard(op: Operation, held: Holdings, drop: list[int]) -> np.ndarray:
    """How many windows of the forgotten documents each datastore shard holds (a window's rows never straddle
    two shards: its first row says which)."""
    cfg = op.run.cfg.corpus
    out = np.zeros(len(op.store.manifest["shards"]), dtype=np.int64)
    for j in drop:
        windows = make_windows([held.documents[j]["tokens"]], cfg.block_size, cfg.stride).rows
        scored = windows[:, 2] - windows[:, 3]  # rows of each window
        first_rows = held.offsets[j] + np.concatenate([[0], np.cumsum(scored)[:-1]])
        np.add.at(out, np.searchsorted(op.store.offsets, first_rows, side="right") - 1, 1)
    return out


def _kept_shards(op: Operation, old_ds: list[Shard], old_teacher: list[Shard], gone: np.ndarray,
                 windows: np.ndarray, numbers) -> tuple[list[Shard], list[Shard]]:
    """The datastore and teacher shards without the forgotten rows: kept, dropped or rewritten (staged)."""
    ds, teacher = [], []
    for s, (d, t) in enumerate(zip(old_ds, old_teacher)):
        lost = gone[op.store.offsets[s] : op.store.offsets[s + 1]]
        if not lost.any():
            ds.append(d)
            teacher.append(t)
        elif not lost.all():
            ds.append(_rewritten(op, d, ~lost, next(numbers), {"windows": int(d.record["windows"] - windows[s])}))
            extra = {"computed": t.record["computed"]} if "computed" in t.record else {}  # searched then
            teacher.append(_rewritten(op, t, ~lost, next(numbers), extra, "teacher"))
    return ds, teacher


def _rewritten(op: Operation, shard: Shard, keep: np.ndarray, number: int, extra: dict,
               kind: str = "datastore") -> Shard:
    folder = op.pending.path(kind)
    arrays = {name: np.asarray(a)[keep] for name, a in shard.load(kind).items()}
    record = save_shard(folder, number, arrays, extra)
    return Shard(record, staged_paths(folder, record))


def _forgotten_targets(op: Operation, held: Holdings, drop: list[int], keys: np.ndarray, view: ShardView, index,
                       target: str, head_ids: np.ndarray | None):
    """The sparse targets of the forgotten positions (datastore order): the backbone's or the kNN teacher's
    without them."""
    search = op.search
    if target == "teacher":
        return knn_rows(index, keys, None, view.rows("values"), search.k, search.temperature, search.top_k,
                        search.batch, op.run.progress, "teacher (forgotten positions)")
    cfg, model = op.run.cfg, op.run.backbone[0]
    rows = backbone_rows(model, _tokens(op, held, drop), cfg.corpus.block_size, cfg.corpus.stride, search.top_k,
                         cfg.backbone.precision, cfg.datastore.batch_size)
    return restrict_to_head(rows, head_ids)


def _tokens(op: Operation, held: Holdings, drop: list[int]) -> list[np.ndarray]:
    """The tokens of the forgotten documents: a corpus document's from the tokenized split, an added one's
    encoded again from its kept text."""
    base = open_tokens(op.run.layout.tokens("train"), verify=False)
    out = []
    for j in drop:
        doc = held.documents[j]
        if "base" in doc:
            out.append(np.asarray(base[doc["base"]]))
        else:
            text = texts_of(op.run.layout.maintenance, doc["text"])[doc["id"]]
            out.append(next(encode_documents([Document(doc["id"], text)], op.run.backbone[1])))
        if len(out[-1]) != doc["tokens"]:
            raise MlpmemError(f"document {doc['id']} no longer encodes to the {doc['tokens']} tokens its rows were "
                              "made of (its text or the tokenizer changed)")
    return out


def _tune(op: Operation, held: Holdings, drop: list[int], gone: np.ndarray, view: ShardView, teacher: list[Shard],
          index, cfg: MaintenanceConfig, seq: int, plan_id: str, probes: list[str]) -> tuple[str, dict]:
    run, folder = op.run, op.pending.path("tune")
    memory = load_memory(run)
    rows = TuneSet.load(folder)
    if rows is None:
        head_ids = None if memory.vocab_ids is None else memory.vocab_ids.cpu().numpy()
        rows = _tune_rows(op, held, drop, gone, view, teacher, index, cfg, seq, head_ids, probes)
        rows.save(folder)
        rows = TuneSet.load(folder)
    state = tune(run, memory, rows, cfg.forget, 1.0, op.pending.path("train"), plan_id, cfg.seed)
    return save_staged_memory(memory, op.pending.path("memory")), {**state, "rows": len(rows)}


def _tune_rows(op: Operation, held: Holdings, drop: list[int], gone: np.ndarray, view: ShardView,
               teacher: list[Shard], index, cfg: MaintenanceConfig, seq: int, head_ids, probes: list[str]) -> TuneSet:
    """Forgotten rows under their new targets (no cross-entropy), the probes' rows under the backbone's, and a
    replay sample under their folded targets (``replay_ratio`` per forgotten or probe row)."""
    lost = np.flatnonzero(gone)
    keys, values = op.store.rows("keys")[lost], op.store.rows("values")[lost]
    forgotten = pure_label(_forgotten_targets(op, held, drop, keys, view, index, cfg.forget.target, head_ids))
    changed = [TuneSet(keys, values, *forgotten)]
    if probes:
        changed.append(probe_rows(op.run, probes, op.pending.path("probe-keys"), head_ids, op.search.top_k))
    count = sum(len(part) for part in changed)
    replay, plan = replay_rows(np.arange(view.num_rows), count, cfg.forget, cfg.seed * 1009 + seq)
    targets = ShardView(teacher, 0, "teacher")
    kept_values = view.rows("values")[replay]
    kept = fold_label(teacher_rows_at(targets, replay), kept_values, op.run.cfg.train.alpha)
    return TuneSet.concat([*changed, TuneSet(view.rows("keys")[replay], kept_values, *kept)], plan)


def _texts(op: Operation, held: Holdings, drop: list[int]):
    """Renames and deletions that take the forgotten added documents out of the kept texts."""
    gone_by_file: dict[str, set[str]] = {}
    for j in drop:
        if "text" in held.documents[j]:
            gone_by_file.setdefault(held.documents[j]["text"], set()).add(held.documents[j]["id"])
    moves, deletes = [], []
    for name, ids in sorted(gone_by_file.items()):
        live = op.run.layout.maintenance / name
        kept = {i: t for i, t in texts_of(op.run.layout.maintenance, name).items() if i not in ids}
        if not kept:
            deletes.append(live)
            continue
        staged = op.pending.path("texts", name.replace("/", "_"))
        staged.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(staged, "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                                           for i, t in kept.items()).encode())
        moves.append((staged, live))
    return moves, deletes

