"""Part of ``python -m studies update-study`` with ``from_study``: more update recipes on a finished study's first run.

Every study keeps a copy of its first run as it was before any update (``<out>/runs/first``). A study given
``from_study: <that study's folder>`` builds and retrains nothing: each of its ``update_variants`` runs on a fresh
copy of that first run with the same arriving documents (the study's ``maintenance`` overrides first, then the
variant's), and is compared, as in the study's own "Update variants" table, with the finished study's retrained
memory (added entities) and with the first run before the update (old entities). Both are scored again on this
study's questions, so every paired interval pairs the same questions. The wall-time ratio divides by the finished
study's measured retraining (same data; another process, so the report names where it was measured).

The data settings must be the finished study's (:data:`SAME_DATA`): a differing one is a one-line error naming it.
A sweep of four recipes costs four updates and their scorings instead of a first run and a retraining each; with
``retrain_seeds`` the finished study's retrained memory is trained again at those seeds (its training alone, on a
copy; :mod:`studies.update.seeds`).
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.errors import ConfigError
from mlpmem.utils.shards import read_json
from studies.update.report import seed_details, variant_rows, without_answers, write_sweep_report
from studies.update.variants import FIRST

SAME_DATA = ("pipeline", "pipeline_set", "synthetic", "arriving_fraction", "batches", "seed")
"""The settings that make the first run, the arriving documents and the retrained memory what they are."""


def finished_study(cfg) -> tuple[Path, dict]:
    """The folder of ``cfg.from_study`` and its results, checked: finished, with its first run kept, the same
    data settings as ``cfg``, and ``cfg`` asking for at least one variant."""
    source = Path(cfg.from_study).expanduser()
    if not (source / "results.json").is_file():
        raise ConfigError(f"from_study={source}: no finished update study there (no results.json)")
    for folder in (FIRST, "retrained"):
        if not (source / "runs" / folder).is_dir():
            raise ConfigError(f"from_study={source}: no runs/{folder} (a study keeps its first run in runs/{FIRST} "
                              "since this option exists: run the study again)")
    if not cfg.update_variants and not cfg.from_study_table:
        raise ConfigError("from_study runs update_variants only (or, with from_study_table, the whole table): give "
                          "at least one variant")
    earlier = read_json(source / "results.json", "the finished study's results")
    recorded = earlier["details"]["config"]
    mine = cfg.to_dict()
    for key in SAME_DATA:
        if recorded.get(key) != mine[key]:
            raise ConfigError(f"from_study={source} was run with {key}={recorded.get(key)!r}, this study asks for "
                              f"{mine[key]!r}: the first run and the retrained memory would not be this study's")
    return source, earlier


def run_sweep(cfg, out: Path, study) -> dict:
    """The variants of ``cfg`` on the first run of ``cfg.from_study`` (see the module docstring); ``study``: the
    study's :class:`~studies.update.study.Study`; returns the results written to ``out/results.json``."""
    source = study.source
    corpus = source / "data" / "base"  # the path the first run was built from: its copies keep reading it
    first, timings = study.open_run(source / "runs" / FIRST, corpus), {}
    retrained = study.retrained(timings)  # the finished study's, with the seconds measured there
    scorer = study.scorer(first.backbone)
    qs = study.questions
    scores = {"before": {"old": scorer.score(first, qs["old"])},  # what the rows compare with, no more
              "retrained": {"arriving": scorer.score(retrained, qs["arriving"])}}
    study.retrained_again(retrained, scorer, scores, timings)
    rows = variant_rows(scores, timings, study.variants(first.dir, corpus, scorer, scores))
    results = {"variants": rows,
               "details": {"config": cfg.to_dict(), "from_study": str(source), "timings": timings,
                           "scores": without_answers(scores), **seed_details(scores, rows)}}
    write_sweep_report(out, results)
    if cfg.docs_dir:
        write_sweep_report(Path(cfg.docs_dir), results)
    return results
