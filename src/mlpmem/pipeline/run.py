"""A run folder and its configuration: :class:`Run` (the folder's paths: :class:`mlpmem.layout.RunLayout`).

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mlpmem.backbone import load_backbone
from mlpmem.errors import ConfigError
from mlpmem.layout import RunLayout
from mlpmem.utils.distributed import launched_rank
from mlpmem.utils.shards import read_json, write_json

if TYPE_CHECKING:
    from mlpmem.pipeline.config import PipelineConfig


class Run:
    """A run folder plus its configuration; lazily loads the backbone once."""

    def __init__(self, cfg: PipelineConfig, progress: bool = True):
        self.cfg, self.progress = cfg, progress
        self.dir = Path(cfg.run_dir)
        self.layout = RunLayout(self.dir)
        self.is_main = launched_rank() == 0  # under torchrun / accelerate launch
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            self.layout.config.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self._backbone = None

    @property
    def backbone(self):
        if self._backbone is None:
            self._backbone = load_backbone(self.cfg.backbone.name)
        return self._backbone

    def path(self, *parts: str) -> Path:
        """A path inside the run folder; one that would escape it (``..``, an absolute part) is an error.

        The check is lexical, so a sub-folder that is a symbolic link (a datastore on another disk) is allowed.
        """
        path = self.dir.joinpath(*parts)
        inside = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(self.dir))  # abspath normalizes ".."
        if not inside:
            raise ConfigError(f"path {path} escapes the run folder {self.dir}")
        return path

    def record_timing(self, stage: str, **values) -> None:
        if not self.is_main:
            return
        path = self.layout.timings
        timings = read_json(path, "timings") if path.exists() else {}
        timings[stage] = values
        write_json(path, timings)

    def timings(self) -> dict:
        path = self.layout.timings
        return read_json(path, "timings") if path.exists() else {}
