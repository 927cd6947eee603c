"""The run's maintenance manifest, ``maintenance/manifest.json``: the documents the run holds and every operation.

::

    {"format": "mlpmem.maintenance/1",
     "datastore": sha256 of datastore/manifest.json,  "teacher": sha256 of teacher/manifest.json,
     "documents": [{"id", "name", "tokens", "added", "snippet", ["text"]}, ...],   (datastore order)
     "operations": [{"seq", "kind", "when", "documents": [ids], ["names": [names], a forget's], "counts": {...},
                     "seconds", "memory_sha256"}]}

It is written by an operation's commit only (:mod:`mlpmem.maintenance.transaction`), together with the new
datastore and teacher manifests whose checksums it records. It is kept apart from them so that those two return
to their exact previous bytes when an operation is undone (an update, then a forget of the same documents),
while this file keeps the record of both. A run no operation has changed has none: its documents are read from
its training split (:func:`mlpmem.maintenance.documents.corpus_documents`). If the datastore was rebuilt since
(``--rebuild``), the list is read again from the split and the operations are kept, marked as before the rebuild.
"""

from __future__ import annotations

import time
from pathlib import Path

from mlpmem.errors import CorruptArtifact
from mlpmem.layout import RunLayout
from mlpmem.maintenance.documents import Holdings, corpus_documents
from mlpmem.utils.shards import MANIFEST, read_json, sha256_file

FORMAT = "mlpmem.maintenance/1"


def ledger_path(layout: RunLayout) -> Path:
    return layout.maintenance / MANIFEST


def load_ledger(layout: RunLayout, num_rows: int) -> dict:
    """The run's maintenance manifest, or a new one listing its training split (see the module docstring)."""
    datastore_sha = sha256_file(layout.datastore / MANIFEST)
    path = ledger_path(layout)
    if path.is_file():
        ledger = read_json(path, "maintenance manifest")
        if ledger.get("format") != FORMAT:
            raise CorruptArtifact(f"{path} is not a maintenance manifest")
        if ledger["datastore"] == datastore_sha:
            return ledger
        for op in ledger["operations"]:
            op["before_rebuild"] = True
        operations = ledger["operations"]
    else:
        operations = []
    return {"format": FORMAT, "datastore": datastore_sha, "teacher": sha256_file(layout.teacher / MANIFEST),
            "documents": corpus_documents(layout.tokens("train"), num_rows, layout.corpus / "train.jsonl"),
            "operations": operations}


def holdings(ledger: dict) -> Holdings:
    return Holdings(ledger["documents"])


def next_seq(ledger: dict) -> int:
    """The sequence number of the next operation (1 for the first)."""
    return 1 + max((op["seq"] for op in ledger["operations"]), default=0)


def operation(kind: str, seq: int, documents: list[str], counts: dict, seconds: float, memory_sha: str,
              source: str | None = None, config: dict | None = None, names: list[str] | None = None) -> dict:
    """The record of one committed operation: what (kind, documents by id and, for a forget, by name, source
    file), when, counts, and the settings it ran with (``config``: the operation's section of the maintenance
    config)."""
    op = {"seq": seq, "kind": kind, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "documents": documents,
          "counts": counts, "seconds": round(seconds, 3), "memory_sha256": memory_sha}
    if names is not None:
        op["names"] = names
    if source is not None:
        op["source"] = source
    if config is not None:
        op["config"] = config
    return op


def forgotten(ledger: dict) -> set[str]:
    """The ids and names of every document a forget removed (some may have been added again since)."""
    return {key for op in ledger["operations"] if op["kind"] == "forget"
            for key in (*op["documents"], *op.get("names", ()))}


def committed(ledger: dict, documents: list[dict], op: dict, datastore_sha: str, teacher_sha: str) -> dict:
    """The manifest after ``op``: its documents, the checksums of the new datastore and teacher manifests."""
    return {"format": FORMAT, "datastore": datastore_sha, "teacher": teacher_sha, "documents": documents,
            "operations": [*ledger["operations"], op]}
