"""The Markdown page of ``mlpmem bench scale`` and its ``results.json``/``results.md`` files."""

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


def markdown(results: dict, command: str) -> str:
    """The measured parts as Markdown, each under the command that measured it (parts not measured are left out)."""
    lines = ["# Scaling measurements\n"]
    for part, (title, note, columns, row) in SECTIONS.items():
        rows = results.get(part)
        if not rows:
            continue
        rows = [rows] if isinstance(rows, dict) else rows
        command_of = results.get("commands", {}).get(part, command)
        lines += [f"## {title}\n", f"Command: `{command_of}`\n", *([note] if note else []),
                  markdown_table(columns, [row(r) for r in rows]), ""]
    return "\n".join(lines)


def write_results(results: dict, out: Path, docs_dir: str | None, command: str) -> None:
    """``results.json`` and ``results.md`` into ``out`` and, if given, ``docs_dir``."""
    text = markdown(results, command)
    for folder in [out] + ([Path(docs_dir)] if docs_dir else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (folder / "results.md").write_text(text)
