"""A stand-in for the BIG-bench source archive: task JSON files at the archive's member paths (``truthful_qa``'s
items at ``truthful_qa/task_mc.json``, as in the real archive)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from memory_mosaics.experiments.bigbench import task_member


def write_archive(path: Path, tasks: dict[str, dict], top: str | None = None) -> Path:
    """Write ``tasks`` (name -> task JSON) into a ``.tar.gz`` laid out like ``bigbench-1.0.0.tar.gz`` (or, with
    ``top``, under that top folder instead, like an archive of the repository)."""
    with tarfile.open(path, "w:gz") as tar:
        for task, data in tasks.items():
            raw = json.dumps(data).encode()
            member = task_member(task)
            info = tarfile.TarInfo(member if top is None else f"{top}/{member.split('/', 1)[1]}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path
