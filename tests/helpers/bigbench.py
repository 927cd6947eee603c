"""A stand-in for the BIG-bench source archive: task JSON files at the archive's member paths (``truthful_qa``'s
items at ``truthful_qa/task_mc.json``, as in the real archive)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from mlpmem.experiments.qa.bigbench import task_member


def write_archive(path: Path, tasks: dict[str, dict]) -> Path:
    """Write ``tasks`` (name -> task JSON) into a ``.tar.gz`` laid out like ``bigbench-1.0.0.tar.gz``."""
    with tarfile.open(path, "w:gz") as tar:
        for task, data in tasks.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(task_member(task))
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path
