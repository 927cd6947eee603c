"""A stand-in for the BIG-bench source archive: task JSON files at the archive's member paths."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from mlpmem.experiments.qa.bigbench import TASK_MEMBER


def write_archive(path: Path, tasks: dict[str, dict]) -> Path:
    """Write ``tasks`` (name -> task JSON) into a ``.tar.gz`` laid out like ``bigbench-1.0.0.tar.gz``."""
    with tarfile.open(path, "w:gz") as tar:
        for task, data in tasks.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(TASK_MEMBER.format(task=task))
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path
