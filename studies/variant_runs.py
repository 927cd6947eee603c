"""Runs that differ from a main run in a few settings and share its folders: what every ablation variant is.

A variant trains into its own folder under the main run's ``ablations/``; the parts it has in common with the main
run (the datastore, the evaluation keystores, the teacher) are read from the main run's folders, not rebuilt, and a
variant may read its teacher from any other folder (a distilled teacher shared by several variants).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from mlpmem.layout import RunLayout


def slug(name: str) -> str:
    """A variant's name as its folder's name."""
    return "".join(c if c.isalnum() or c in "=.-" else "_" for c in name)


def with_overrides(cfg, overrides: dict):
    """``cfg`` with ``{"section.key": value}`` overrides applied to its sections."""
    sections: dict[str, dict] = {}
    for key, value in overrides.items():
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    return dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **values)
                                       for section, values in sections.items()})


def config_record(cfg) -> dict:
    """The pipeline configuration as stored next to a study's results (JSON types), to tell whether they
    belong to the configuration at hand."""
    return json.loads(json.dumps(cfg.to_dict(), default=str))


class SharedLayout(RunLayout):
    """A variant's run folder whose ``shared`` parts (``datastore``, ``eval``, ``teacher``) are the main run's,
    and whose teacher is ``teacher`` when given."""

    def __init__(self, root: Path, main: RunLayout, shared: set[str], teacher: Path | None = None):
        super().__init__(root)
        object.__setattr__(self, "main", main)
        object.__setattr__(self, "shared", frozenset(shared))
        object.__setattr__(self, "teacher_dir", None if teacher is None else Path(teacher))

    @property
    def datastore(self) -> Path:
        return self.main.datastore if "datastore" in self.shared else super().datastore

    def keystore(self, split: str) -> Path:
        if split == "train":
            return self.datastore
        return self.main.keystore(split) if "eval" in self.shared else super().keystore(split)

    @property
    def teacher(self) -> Path:
        if self.teacher_dir is not None:
            return self.teacher_dir
        return self.main.teacher if "teacher" in self.shared else super().teacher


def variant_run(run, cfg, folder, shared: set[str], teacher: Path | None = None):
    """A run in ``folder`` whose ``shared`` top-level folders (datastore, eval, teacher) are the main run's (its
    teacher ``teacher`` when given)."""
    variant = copy.copy(run)
    variant.cfg, variant.dir, variant.layout = cfg, Path(folder), SharedLayout(folder, run.layout, shared, teacher)
    return variant
