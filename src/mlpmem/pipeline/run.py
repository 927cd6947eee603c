"""A run folder and its configuration: :class:`Run` (the folder's paths: :class:`mlpmem.layout.RunLayout`).

Every stage is idempotent: rerun, it reuses what is complete and resumes what is not. A folder becomes a run
folder only if it is new, empty or already mlpmem's (:func:`check_run_dir`); one command at a time writes it
(:meth:`Run.locked`); opening it completes a maintenance commit a kill interrupted (:mod:`mlpmem.utils.commit`),
so every command reads a whole run; ``config.yaml`` is written when a stage completes (:meth:`Run.write_config`),
after it was checked against what the folder holds, and never over the user's own file.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mlpmem.backbone import SHIPPED_MODELS, load_backbone
from mlpmem.compute import compute_device
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.layout import RunLayout, is_written
from mlpmem.utils.commit import is_pending, recover
from mlpmem.utils.distributed import launched_rank
from mlpmem.utils.lock import describe, folder_lock
from mlpmem.utils.shards import atomic_write_bytes, read_json, write_json

if TYPE_CHECKING:
    from mlpmem.pipeline.config import PipelineConfig

CONFIG_HEADER = "# Written by mlpmem: the configuration of the latest completed stage (stages/ records each one's).\n"


def check_run_dir(path: Path) -> None:
    """Refuse a ``run_dir`` that is the root or home folder, an existing file, or a folder holding files mlpmem
    did not write (a folder mlpmem has locked before is its own, whatever was added to it since)."""
    resolved = path.expanduser().resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
        raise ConfigError(f"run_dir {path} is {'the root' if resolved.parent == resolved else 'the home'} folder: "
                          "give the run a folder of its own (e.g. runs/NAME)")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run_dir {path} is an existing file, not a folder")
    if not path.is_dir() or RunLayout(path).lock.exists():
        return
    foreign = sorted(p.name for p in path.iterdir() if not is_written(p.name))
    if foreign:
        listed = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ConfigError(f"run_dir {path} holds files mlpmem did not write ({listed}): give the run an empty or "
                          "new folder")


def check_config_home(config: str | Path, run_dir: str, overrides: list[str]) -> None:
    """Refuse a run folder's own ``config.yaml`` whose ``run_dir`` names another folder (the folder was copied or
    moved): the command would act on that other folder. ``--set run_dir=...`` says which folder, deliberately."""
    path = Path(config)
    folder = path.parent
    if path.name != RunLayout(folder).config.name or any(o.startswith("run_dir=") for o in overrides):
        return
    if not (RunLayout(folder).lock.exists() or RunLayout(folder).record("train").parent.is_dir()):
        return  # a config.yaml of the user's own, not a run folder's
    if Path(run_dir).expanduser().resolve() != folder.resolve():
        raise ConfigError(f"{path} is the configuration of the run folder {folder} but names run_dir {run_dir} "
                          f"(the folder was copied or moved): act on {folder} with `--set run_dir={folder}`, or on "
                          f"{run_dir} with its own config.yaml")


def check_backbone_name(name: str) -> str:
    """``name`` if it can name a backbone: a shipped name, an existing model folder, or a hub name
    (``org/model``); a path to no folder is a one-line error instead of the hub client's "Repo id must be..."."""
    if name in SHIPPED_MODELS or Path(name).is_dir():
        return name
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ConfigError(f"backbone.name {name} is a file, not a model folder")
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith("/"):
        raise ConfigError(f"backbone.name {name}: no such model folder (nor a shipped model: "
                          f"{', '.join(SHIPPED_MODELS)})")
    return name


def is_own_config(path: Path) -> bool:
    """Whether mlpmem wrote ``path`` (its header, or exactly what ``yaml.safe_dump`` writes, as before the
    header existed); a file with the user's own comments or layout is not."""
    text = path.read_text()
    if text.startswith(CONFIG_HEADER):
        return True
    try:
        return text == yaml.safe_dump(yaml.safe_load(text), sort_keys=False)
    except yaml.YAMLError:
        return False


class Run:
    """A run folder plus its configuration; lazily loads the backbone once.

    ``config_file`` is the YAML the configuration was read from: it is never rewritten, even when it is the
    folder's own ``config.yaml``. ``backbone``: an already loaded ``(model, tokenizer)`` of ``cfg.backbone``,
    used instead of loading it again (several runs sharing one backbone).
    """

    def __init__(self, cfg: PipelineConfig, progress: bool = True, config_file: str | Path | None = None,
                 backbone: tuple | None = None):
        self.cfg, self.progress = cfg, progress
        self.dir = Path(cfg.run_dir).expanduser()
        self.layout = RunLayout(self.dir)
        self.is_main = launched_rank() == 0  # under torchrun / accelerate launch
        self.config_file = None if config_file is None else Path(config_file)
        check_run_dir(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.recover()
        self._backbone = backbone
        self.key_donor: Run | None = None
        """Another run whose keystores this one's may share shards with (same backbone and key settings; see
        :func:`mlpmem.pipeline.reuse.take_key_shards`): ``python -m studies scale-data`` sets it to the largest size's
        run."""

    @property
    def backbone(self):
        if self._backbone is None:
            name = check_backbone_name(self.cfg.backbone.name)
            try:
                model, tokenizer = load_backbone(name)
                self._backbone = model.to(compute_device(self.cfg.backbone.device)), tokenizer
            except ValueError as exc:  # the hub client's validation of a name that is no folder
                raise MlpmemError(f"cannot load backbone {name!r}: {str(exc).splitlines()[0]}") from None
        return self._backbone

    def recover(self) -> bool:
        """Complete, under the folder's lock, a maintenance commit a kill interrupted (True if there was one)."""
        if not (self.is_main and is_pending(self.dir)):
            return False
        with self.locked():
            return recover(self.dir)

    @contextlib.contextmanager
    def locked(self, command: str | None = None):
        """Hold the folder's lock (process 0 only: the other processes of a launch work under it)."""
        if not self.is_main:
            yield
            return
        with folder_lock(self.dir, command) as stale:
            if stale:
                print(f"note: {self.dir} was locked by {describe(stale)}, which has ended; taking over",
                      file=sys.stderr)
            yield

    def write_config(self) -> None:
        """Record the configuration in ``config.yaml``, unless that file is the user's (the file the
        configuration was read from, or one mlpmem did not write)."""
        target = self.layout.config
        if not self.is_main:
            return
        if target.exists():
            if self.config_file is not None and self.config_file.exists() and target.samefile(self.config_file):
                return
            if not is_own_config(target):
                return
        atomic_write_bytes(target, (CONFIG_HEADER + yaml.safe_dump(self.cfg.to_dict(), sort_keys=False)).encode())

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

    def record_build(self, stage: str, rows: int, before: int, seconds: float, **values) -> None:
        """Time a sharded build by the rows this call built: a resumed build found ``before`` of its ``rows`` already
        there (recorded as ``resumed_after``); a build under a second or with nothing to do is not a measurement."""
        done = rows - before
        if seconds > 1 and done:
            resumed = {"resumed_after": before} if before else {}
            self.record_timing(stage, tokens=done, seconds=seconds, tokens_per_s=done / seconds, **values, **resumed)

    def timings(self) -> dict:
        path = self.layout.timings
        return read_json(path, "timings") if path.exists() else {}

