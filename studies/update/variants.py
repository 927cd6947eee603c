"""Part of ``python -m studies update-study``: other update recipes, each on a copy of the same first run.

A study's ``update_variants`` (``{name: [maintenance overrides]}``, e.g. ``{"epochs-6": ["update.epochs=6"]}``)
are applied after the study's own ``maintenance`` overrides, each to a copy of the first run taken before the
study's own update (``<out>/runs/variant-<name>``), with the same arriving documents: timed like the study's update,
then scored on the old and arriving entities with the study's questions. Once the retrained memory is scored, every
variant gets the study's update rows: the added entities against the retrained memory, the old entities against
before the update (each with its paired interval), and the wall time against retraining. So one study compares
update recipes against one first run and one retrained memory, at the cost of an update and two scorings each.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.maintenance.config import load_maintenance_config

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCORED = ("old", "arriving")
FIRST = "first"
"""The folder under ``<out>/runs`` where a study keeps its first run as it was before any update."""


def check_variants(variants: dict) -> None:
    """One-line errors for a variant name that cannot be a folder or overrides that are not maintenance settings."""
    for name, overrides in variants.items():
        if not NAME.match(name):
            raise ConfigError(f"update-study update_variants: {name!r} is not a folder name (letters, digits, . _ -)")
        load_maintenance_config(overrides=list(overrides))


def run_variants(variants: dict[str, list[str]], maintenance: list[str], base_dir: Path, out: Path,
                 open_copy, update, score) -> dict[str, dict]:
    """Every variant on a copy of the first run in ``base_dir`` (not yet updated): ``{name: {"overrides",
    "seconds", "scores": {group: score}}}``. ``open_copy(folder) -> run`` opens a copy as a run, ``update(run,
    maintenance) -> seconds`` applies the study's arriving documents, ``score(run) -> {group: score}`` scores the
    groups of :data:`SCORED`."""
    results = {}
    for name, overrides in variants.items():
        folder = out / "runs" / step(name)
        if folder.exists():
            raise ConfigError(f"{folder} already exists: a study never writes over a finished one")
        shutil.copytree(base_dir, folder)
        run = open_copy(folder)
        seconds = update(run, load_maintenance_config(overrides=after(maintenance, overrides)))
        results[name] = {"overrides": list(overrides), "seconds": seconds, "scores": score(run)}
    return results


def step(name: str) -> str:
    """A variant's folder under ``<out>/runs`` and the key of its scores among the study's steps."""
    return f"variant-{name}"


def after(base: list[str], overrides: list[str]) -> list[str]:
    """``KEY=VALUE`` items of ``base`` with those of ``overrides`` applied after them: an override of a key ``base``
    gives replaces it (a key may be given once to the config loader)."""
    keys = {item.split("=", 1)[0].strip() for item in overrides}
    return [item for item in base if item.split("=", 1)[0].strip() not in keys] + list(overrides)

