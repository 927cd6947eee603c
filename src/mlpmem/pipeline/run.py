"""A run folder and its configuration.

    run_dir/
      config.yaml            the resolved configuration
      corpus/                prepared splits (for raw user corpora)
      tokens/<split>/        each split tokenized once into a memory-mapped token stream
      datastore/             training keystore = the kNN datastore (keys, next tokens)
      eval/{validation,test} evaluation keystores (keys, next tokens, backbone log-probs)
      knnlm/                 neighbour lists of eval queries, the sweep, results.json
      teacher/               sparse top-K kNN targets for every datastore position
      timings.json           seconds and tokens/s of every stage

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mlpmem.errors import ConfigError
from mlpmem.utils.distributed import launched_rank
from mlpmem.utils.shards import read_json, write_json

if TYPE_CHECKING:
    from mlpmem.pipeline.config import PipelineConfig


class Run:
    """A run folder plus its configuration; lazily loads the backbone once."""

    def __init__(self, cfg: PipelineConfig, progress: bool = True):
        self.cfg, self.progress = cfg, progress
        self.dir = Path(cfg.run_dir)
        self.is_main = launched_rank() == 0  # under torchrun / accelerate launch
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            (self.dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self._backbone = None

    @property
    def backbone(self):
        if self._backbone is None:
            from mlpmem.backbone import load_backbone

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
        path = self.path("timings.json")
        timings = read_json(path, "timings") if path.exists() else {}
        timings[stage] = values
        write_json(path, timings)

    def timings(self) -> dict:
        path = self.path("timings.json")
        return read_json(path, "timings") if path.exists() else {}
