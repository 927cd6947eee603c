"""Another run's finished stages taken into a new run folder: ``mlpmem run CONFIG --reuse-from RUN``.

Studying a recipe (another training schedule, α, memory size, a longer run) on a corpus whose datastore and teacher
are already built should not encode the corpus again. :func:`reuse_stages` takes the datastore, the kNN-LM
neighbour lists and the teacher of a source run into a run folder that has built none of them, in pipeline order,
each only if the source's record of it (:mod:`mlpmem.pipeline.records`) holds exactly the inputs this
configuration gives; the first stage that differs, and every one after it (they read it), is built here as usual.
Files are hard links (copies across file systems): every stage writes through temporaries and atomic renames,
never in place, so neither run can change the other's files. The source's timings of the stages taken are copied
with ``reused_from``, so that the new run's report still states what its datastore and teacher cost.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.layout import RunLayout
from mlpmem.pipeline import records
from mlpmem.pipeline.run import Run
from mlpmem.utils.io import link_or_copy
from mlpmem.utils.shards import read_json, write_json

STAGES = ("datastore", "knnlm", "teacher")
"""The stages another run can lend, in pipeline order (the memory and its evaluation are what a new run is for)."""
FOLDERS = {"datastore": ("corpus", "tokens", "datastore", "eval"), "knnlm": ("knnlm",), "teacher": ("teacher",)}
"""The folders of each stage's artifacts (``corpus/`` only for a raw user corpus)."""
TIMINGS = {"datastore": ("keys_",), "knnlm": ("knn_search_",), "teacher": ("teacher",)}
"""Prefixes of the ``timings.json`` entries each stage writes."""


def reuse_stages(run: Run, source_dir: str | Path) -> list[str]:
    """Take the finished stages of the run folder ``source_dir`` that ``run`` would build from the same inputs;
    returns the stages taken (none when ``run`` has already built its datastore)."""
    source = RunLayout(Path(source_dir))
    if not source.record("datastore").is_file():
        raise ConfigError(f"--reuse-from {source_dir}: not a run folder with a finished datastore")
    if source.root.resolve() == run.dir.resolve():
        raise ConfigError(f"--reuse-from {source_dir} is this run's own folder")
    if records.read_record(run, "datastore") is not None:
        return []
    taken = []
    for stage in STAGES:
        record = records.read_record_at(source.record(stage), stage)
        # compared as the pipeline compares its own records (keys added since the record was written are not);
        # the teacher's inputs read the temperature of the kNN-LM results taken just before it
        if record is None or records.changes(record["inputs"], records.inputs(run, stage)):
            break
        _take(run, source, stage, record)
        taken.append(stage)
    return taken


def _take(run: Run, source: RunLayout, stage: str, record: dict) -> None:
    for folder in FOLDERS[stage]:
        if (source.root / folder).is_dir():
            if (run.dir / folder).exists():
                shutil.rmtree(run.dir / folder)  # an unfinished build of the stage (it has no record)
            shutil.copytree(source.root / folder, run.dir / folder, copy_function=link_or_copy)
    if source.timings.exists():
        for name, values in read_json(source.timings, "timings").items():
            if name.startswith(TIMINGS[stage]):
                run.record_timing(name, **{**values, "reused_from": str(source.root)})
    run.layout.record(stage).parent.mkdir(exist_ok=True)
    write_json(run.layout.record(stage), record)
