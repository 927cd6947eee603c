"""The Markdown page of ``python -m studies bench scale`` and its ``results.json``/``report.md`` files.

Below each table, the figures the docs draw from it (growth of peak RSS, ratios, what FSDP should save) are computed
here from the rows, so that no page has to derive them by hand."""

from __future__ import annotations

import json
from pathlib import Path

from mlpmem.reporting.tables import markdown_table

SECTIONS = {
    "processes": ("Throughput with 1 and N processes", "",
                  ["stage", "processes", "tokens", "launch wall s", "stage s", "tokens/s"],
                  lambda r: [r["stage"], r["processes"], r["rows"], f"{r['launch_wall_s']:.1f}", f"{r['stage_s']:.1f}",
                             f"{r['tokens_per_s']:.0f}"]),
    "memory": ("Peak RSS against datastore size", "", ["keys", "datastore MB", "stage", "seconds", "peak RSS MB"],
               lambda r: [r["rows"], f"{r['datastore_mb']:.0f}", r["stage"], f"{r['seconds']:.1f}",
                          f"{r['peak_rss_mb']:.0f}"]),
    "resume": ("Resume against rerun from scratch (teacher)", "",
               ["keys", "shards", "shards done at SIGKILL", "scratch s", "resume s", "resume / scratch"],
               lambda r: [r["rows"], r["shards"], r["shards_done_at_kill"], f"{r['scratch_s']:.1f}",
                          f"{r['resume_s']:.1f}", f"{r['resume_over_scratch']:.2f}"]),
    "sharding": ("DDP against FSDP, 2 processes",
                 "Large frees returned to the OS: glibc `M_MMAP_THRESHOLD` = 1 MiB (FSDP on CPU sets it itself; DDP "
                 "is shown with and without it).\n",
                 ["sharding", "large frees returned", "process", "memory parameters", "steps", "s / step",
                  "RSS before training MB", "peak RSS MB"],
                 lambda r: [r["sharding"], "yes" if r.get("mmap_frees") else "no", r["rank"], f"{r['parameters']:,}",
                            r["steps"], f"{r['seconds'] / r['steps']:.2f}", f"{r['rss_before_mb']:.0f}",
                            f"{r['peak_rss_mb']:.0f}"]),
    "corpus": ("Peak RSS of the datastore stage against corpus size",
               "Training split = the config corpus's training documents repeated; a random 2-layer backbone (d = 64) "
               "with the config's tokenizer. *stream*: the stage as it runs (tokenized to disk, windows encoded from "
               "the memory map); *in-ram*: only tokenizing the split into arrays in RAM, as before.\n",
               ["repeats", "corpus MB", "tokens", "mode", "seconds", "peak RSS MB"],
               lambda r: [r["repeats"], f"{r['corpus_mb']:.0f}", r["tokens"], r["mode"], f"{r['seconds']:.1f}",
                          f"{r['peak_rss_mb']:.0f}"]),
}
"""Each measured part's heading, note, table columns and row formatter."""


def _by(table: list[dict], **match) -> list[dict]:
    return [r for r in table if all(r.get(k) == v for k, v in match.items())]


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def _memory_figures(rows: list[dict]) -> str:
    small, large = min(r["rows"] for r in rows), max(r["rows"] for r in rows)
    if small == large:
        return ""
    growth = {stage: _by(rows, rows=large, stage=stage)[0]["peak_rss_mb"]
              - _by(rows, rows=small, stage=stage)[0]["peak_rss_mb"]
              for stage in dict.fromkeys(r["stage"] for r in rows)}
    return (f"From {small:,} to {large:,} keys ({large / small:.0f}×) peak RSS grows by "
            + ", ".join(f"{mb:.0f} MB ({stage})" for stage, mb in growth.items()) + ".")


def _sharding_figures(rows: list[dict]) -> str:
    ddp, fsdp = _by(rows, sharding="ddp", mmap_frees=True), _by(rows, sharding="fsdp")
    if not (ddp and fsdp):
        return ""
    world, params_mb = len(fsdp), fsdp[0]["parameters"] * 4 / 2**20
    # gradients and the two AdamW moments are sharded: each process keeps 1/world of them
    predicted = 3 * params_mb * (1 - 1 / world)
    saved = _mean(ddp, "peak_rss_mb") - _mean(fsdp, "peak_rss_mb")
    slower = _mean(fsdp, "seconds") / _mean(ddp, "seconds")
    return (f"FSDP against DDP (same allocator setting), mean of the processes: peak RSS {saved:.0f} MB lower "
            f"(sharding the gradients and two AdamW moments of {params_mb:.0f} MB of fp32 parameters over {world} "
            f"processes predicts {predicted:.0f} MB), {slower:.2f}× the seconds per step.")


def _corpus_figures(rows: list[dict]) -> str:
    small, large = min(r["tokens"] for r in rows), max(r["tokens"] for r in rows)
    if small == large:
        return ""
    per_token = {mode: (_by(rows, tokens=large, mode=mode)[0]["peak_rss_mb"]
                        - _by(rows, tokens=small, mode=mode)[0]["peak_rss_mb"]) * 2**20 / (large - small)
                 for mode in dict.fromkeys(r["mode"] for r in rows)}
    return (f"Peak RSS growth per added token from {small:,} to {large:,} tokens: "
            + ", ".join(f"{b:.1f} bytes ({mode})" for mode, b in per_token.items()) + ".")


FIGURES = {"memory": _memory_figures, "sharding": _sharding_figures, "corpus": _corpus_figures}
"""The derived figures written under a part's table (parts without one have none)."""


def markdown(results: dict, command: str) -> str:
    """The measured parts as Markdown, each under the command that measured it (parts not measured are left out)."""
    lines = ["# Scaling measurements\n"]
    for part, (title, note, columns, row) in SECTIONS.items():
        rows = results.get(part)
        if not rows:
            continue
        rows = [rows] if isinstance(rows, dict) else rows
        command_of = results.get("commands", {}).get(part, command)
        figures = FIGURES[part](rows) if part in FIGURES else ""
        lines += [f"## {title}\n", f"Command: `{command_of}`\n", *([note] if note else []),
                  markdown_table(columns, [row(r) for r in rows]), "", *([figures, ""] if figures else [])]
    return "\n".join(lines)


def write_results(results: dict, out: Path, docs_dir: str | None, command: str) -> None:
    """``results.json`` and ``report.md`` into ``out`` and, if given, ``docs_dir``."""
    text = markdown(results, command)
    for folder in [out] + ([Path(docs_dir)] if docs_dir else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (folder / "report.md").write_text(text)
