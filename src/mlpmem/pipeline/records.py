"""What every stage of a run folder was built from: ``stages/<stage>.json``, checked before the stage is reused.

A record holds the stage's *inputs* as :mod:`mlpmem.freshness` settings (``built_from``): every configuration value its
artifacts depend on (its own section and those of the stages upstream, as dotted keys such as ``train.lr``; the
teacher's temperature as the one it used, possibly chosen by the kNN-LM sweep), plus, for the evaluation, the
checksum of the memory it scored. Before a stage runs, the records of the stages it reads and its own are
compared (:func:`mlpmem.freshness.staleness`) with the inputs the configuration gives now:

- the datastore, the teacher and the memory are costly work the user may want: a changed input is refused
  with one line naming the setting, its recorded and its new value, and the command that rebuilds the stage;
  ``--rebuild`` of that stage replaces it;
- the kNN-LM sweep and the evaluation are always recomputed (the neighbour lists they reuse check their own
  inputs, :func:`mlpmem.pipeline.knnlm.cached_neighbours`), so their records only tell readers (``generate``,
  ``report``) whether ``results.json`` is the current memory's.

A record that lacks a key the configuration gives is stale like one with another value (rebuild the stage);
a stage without a record (one killed before it finished) is checked by its artifacts' own manifests and
recorded once it completes. The memory's record also writes the checksums of its files
(:mod:`mlpmem.utils.checksums`), verified whenever it is loaded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from safetensors import safe_open

from mlpmem import freshness
from mlpmem.errors import CorruptArtifact, StaleArtifact
from mlpmem.layout import RunLayout
from mlpmem.pipeline.knnlm import NEIGHBOURS, open_neighbours
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import teacher_config
from mlpmem.utils.checksums import check_finite, record_folder, recorded, require_record
from mlpmem.utils.shards import MANIFEST, read_json, sha256_file, write_json

FORMAT = "mlpmem.stage/2"
MEMORY_FILES = ("config.json", "model.safetensors")

OWN = {"datastore": ("seed", "backbone", "corpus", "datastore"), "knnlm": ("knnlm",),
       "teacher": ("teacher", "teacher_temperature_from_knnlm"), "train": ("memory", "train"), "eval": ()}
"""The configuration sections (or top-level keys) each stage's own artifacts depend on."""
UPSTREAM = {"datastore": (), "knnlm": ("datastore",), "teacher": ("datastore",), "train": ("teacher",),
            "eval": ("train", "knnlm")}
"""The stages whose artifacts each stage reads."""
RUNTIME = frozenset({"train.sharding", "teacher.query_batch", "knnlm.query_batch"})
"""Keys that change how a stage runs, not what it computes."""
KEPT = ("datastore", "teacher", "train")
"""Stages whose changed inputs are refused (their work is kept) rather than recomputed."""

WHAT = {"datastore": "the datastore", "teacher": "the teacher", "train": "the memory",
        "knnlm": "the kNN-LM results", "eval": "results.json"}


def memory_sha256(folder: str | Path) -> str | None:
    """The recorded checksum of the memory weights saved in ``folder`` (None before any is recorded)."""
    return (recorded(folder) or {}).get("model.safetensors")


def own_inputs(run: Run, stage: str) -> dict[str, Any]:
    """The configuration values ``stage`` itself depends on (not its upstream's)."""
    config = run.cfg.to_dict()
    if stage == "teacher":
        config["teacher"] = dataclasses.asdict(teacher_config(run))  # the temperature it uses
    if stage == "eval":
        return {"memory.sha256": memory_sha256(run.layout.memory)}
    flat = freshness.settings({section: config[section] for section in OWN[stage]})
    return {k: v for k, v in flat.items() if k not in RUNTIME}


def inputs(run: Run, stage: str) -> dict[str, Any]:
    """Everything ``stage`` was built from: its own inputs and, recursively, its upstream stages'."""
    out = {}
    for up in UPSTREAM[stage]:
        out.update(inputs(run, up))
    out.update(own_inputs(run, stage))
    return freshness.settings(out)  # as a record reads back (tuples are lists)


def read_record(run: Run, stage: str) -> dict | None:
    return read_record_at(run.layout.record(stage), stage)


def read_record_at(path: Path, stage: str) -> dict | None:
    """The stage record at ``path`` (any run folder's ``stages/<stage>.json``); None when there is none."""
    if not path.is_file():
        return None
    record = read_json(path, f"record of the {stage} stage")
    if record.get("format") != FORMAT or not isinstance(record.get("built_from"), dict):
        raise CorruptArtifact(f"{path} is not a {FORMAT} stage record: rebuild the stage (--rebuild)")
    return record


def is_current(run: Run, stage: str) -> bool:
    """Whether ``stage`` has a record and it matches what the configuration gives now."""
    record = read_record(run, stage)
    return record is not None and freshness.is_current(record["built_from"], inputs(run, stage))


def hint(run: Run, stage: str) -> str:
    """How to bring a stale ``stage`` up to date."""
    config = run.config_file or "CONFIG"
    if stage == "datastore":
        return f"rebuild the run with `mlpmem run {config} --rebuild`, or set run_dir to a new folder"
    if stage in KEPT:
        verb = "retrain" if stage == "train" else "rebuild"
        keep = "" if stage == "teacher" else " and the teacher"
        return (f"{verb} it with `mlpmem {stage} {config} --rebuild`, or give it a new folder that keeps this one's "
                f"datastore{keep}: `mlpmem run {config} --set run_dir=NEW --reuse-from {run.dir}`")
    return f"run `mlpmem {'eval' if stage == 'eval' else 'knnlm'} {config}`"


def check(run: Run, stage: str) -> None:
    """Raise a one-line :class:`StaleArtifact` if ``stage``'s record disagrees with the configuration."""
    record = read_record(run, stage)
    if record is None:
        return
    built = "trained" if stage == "train" else "computed" if stage in ("knnlm", "eval") else "built"
    was = "were" if stage == "knnlm" else "was"
    freshness.check(record["built_from"], inputs(run, stage), f"{WHAT[stage]} in {run.dir}", hint(run, stage),
                    built=f"{was} {built}")


def check_upstream(run: Run, stage: str) -> None:
    """Check the records of every stage ``stage`` reads, the earliest first (its hint is the one to follow)."""
    seen: list[str] = []

    def visit(name: str) -> None:
        for up in UPSTREAM[name]:
            visit(up)
            if up not in seen:
                seen.append(up)

    visit(stage)
    for up in seen:
        check(run, up)


def forget(run: Run, stage: str) -> None:
    """Drop ``stage``'s record before the stage rewrites its artifacts (a kill leaves no false record)."""
    if run.is_main:
        run.layout.record(stage).unlink(missing_ok=True)
        if stage == "train":
            run.layout.memory_checksums.unlink(missing_ok=True)


def record(run: Run, stage: str) -> dict:
    """Write ``stage``'s record now that it has completed (the memory: after checking and checksumming it)."""
    if not run.is_main:  # process 0 saved the memory and writes every record
        return {}
    if stage == "train":
        record_memory(run.layout.memory)
    entry = {"format": FORMAT, "stage": stage, "built_from": inputs(run, stage)}
    run.layout.record(stage).parent.mkdir(exist_ok=True)
    write_json(run.layout.record(stage), entry)
    return entry


def check_memory_values(folder: Path) -> None:
    """Refuse a memory whose weights are unreadable or hold NaN/Inf (a diverged training, a damaged file)."""
    weights = folder / "model.safetensors"
    try:
        with safe_open(str(weights), framework="pt") as handle:
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers and truncation
        raise CorruptArtifact(f"{weights}: unreadable safetensors file ({str(exc).splitlines()[0]})") from None
    check_finite(tensors, str(weights))


def record_memory(folder: Path) -> dict[str, str]:
    """Check the values of a freshly trained memory, then record its files' checksums."""
    check_memory_values(folder)
    return record_folder(folder, MEMORY_FILES)


def verify_memory(run: Run) -> None:
    """The memory of the run exists, its files match their recorded checksums (a memory without its record is
    refused) and its weights are finite (before any reader loads it)."""
    folder, config = run.layout.memory, run.config_file or "CONFIG"
    if not (folder / "config.json").is_file():
        raise CorruptArtifact(f"the run {run.dir} has no trained memory: run `mlpmem train {config}` first")
    if read_record(run, "train") is None:
        remedy = f"its training was not recorded as finished: run `mlpmem train {config}` (it resumes)"
    else:
        remedy = (f"if these weights are the run's own, record them with `mlpmem record-checksums {run.dir}`; "
                  f"else retrain the memory (`mlpmem train {config} --rebuild`)")
    require_record(folder, f"memory {folder}", remedy)
    check_memory_values(folder)


def verify_evaluation_inputs(run: Run) -> None:
    """Before an evaluation: the memory and the cached kNN-LM neighbour lists match their checksums, and the
    lists were searched in the datastore the run holds now."""
    verify_memory(run)
    check_knnlm_current(run.layout, run.config_file or "CONFIG")
    for split in ("validation", "test"):
        open_neighbours(run.layout.neighbours(split))


def check_knnlm_current(layout: RunLayout, config: str | Path) -> None:
    """Refuse kNN-LM results searched in another datastore than the run's now (one an update or a forget changed
    since): their neighbour ids and perplexities are another datastore's."""
    datastore = sha256_file(layout.datastore / MANIFEST)
    for split in ("validation", "test"):
        meta = read_json(layout.neighbours(split) / NEIGHBOURS, f"kNN-LM neighbour lists of {split}")
        if meta.get("inputs", {}).get("datastore") != datastore:
            raise StaleArtifact(f"the kNN-LM results in {layout.knnlm} were searched in the datastore before its "
                                f"last change (an update or a forget): run `mlpmem knnlm {config}` first (or "
                                f"`mlpmem run {config}`)")


def results_match_memory(run: Run) -> bool:
    """Whether ``results.json`` was computed for the memory now in the run (by the memory's checksum recorded in
    the evaluation's record)."""
    return results_match_memory_at(run.layout)


def results_match_memory_at(layout: RunLayout) -> bool:
    """:func:`results_match_memory` of any run folder's files."""
    record = read_record_at(layout.record("eval"), "eval")
    return record is not None and record["built_from"].get("memory.sha256") == memory_sha256(layout.memory)


def check_shown(layout: RunLayout) -> None:
    """Refuse a finished run whose numbers a table would show beside artifacts they no longer describe: kNN-LM
    results of another datastore, ``results.json`` of another memory (as ``report`` refuses them)."""
    config = layout.config
    check_knnlm_current(layout, config)
    if layout.results.is_file() and not results_match_memory_at(layout):
        raise StaleArtifact(f"{layout.results} was computed for another memory than {layout.memory}: run "
                            f"`mlpmem eval {config}` first")
