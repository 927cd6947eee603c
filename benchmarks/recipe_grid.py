"""The memory's depth against α as one grid, from `python -m studies ablate --out` folders: validation PPL of
memory + backbone (and of the memory alone over the targets its head covers) per cell, written as OUT/report.md and
OUT/results.json.

Usage: python benchmarks/recipe_grid.py --out DIR --command "..." [--test-summary FILE] ABLATION_DIR...
Every row of every folder's results.json is one cell, keyed by its (preset, alpha) in the folder's config with the
variant's own setting; a cell measured twice must agree (the same seeded memory) or the script stops.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cells(folder: Path) -> dict[tuple[str, float], dict]:
    results = json.loads((folder / "results.json").read_text())
    config = results["config"]
    out = {}
    for row in results["rows"]:
        preset = row.get("preset", config["memory"]["preset"])
        alpha = row.get("alpha", config["train"]["alpha"])
        out[(preset, float(alpha))] = row
    return out


def merge(folders: list[Path]) -> dict[tuple[str, float], dict]:
    grid: dict[tuple[str, float], dict] = {}
    for folder in folders:
        for key, row in cells(folder).items():
            if key in grid and abs(grid[key]["joint_ppl"] - row["joint_ppl"]) > 1e-6:
                raise SystemExit(f"{folder}: cell {key} differs from an earlier folder's "
                                 f"({row['joint_ppl']} vs {grid[key]['joint_ppl']})")
            grid.setdefault(key, row)
    return grid


def table(grid: dict[tuple[str, float], dict]) -> list[str]:
    presets = sorted({p for p, _ in grid}, key=["tiny", "small", "base", "large"].index)
    alphas = sorted({a for _, a in grid})
    lines = ["| memory \\ α | " + " | ".join(f"{a:g}" for a in alphas) + " |", "|---" * (len(alphas) + 1) + "|"]
    for preset in presets:
        row = []
        for alpha in alphas:
            c = grid.get((preset, alpha))
            row.append("—" if c is None else f"{c['joint_ppl']:.3f} (λ={c['best_lambda']:g}; alone "
                                             f"{c['memory_ppl']:.3f}; {c['train_seconds']:.0f} s)")
        lines.append(f"| {preset} | " + " | ".join(row) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", required=True, help="the command that produced the folders (for the report)")
    parser.add_argument("--test-summary", type=Path, help="an `mlpmem summarize` table of the runs on test, appended")
    args = parser.parse_args()
    grid = merge(args.folders)
    best = min(grid, key=lambda k: grid[k]["joint_ppl"])
    backbone = next(iter(grid.values()))["backbone_ppl"]
    args.out.mkdir(parents=True, exist_ok=True)
    report = ["# The memory's depth against α", "", "```bash", args.command, "```", "",
              f"Validation PPL of memory + backbone (best λ; the memory alone over the targets its head covers; "
              f"training seconds), backbone {backbone:.3f}; from {', '.join(f'`{f}`' for f in args.folders)}.", "",
              *table(grid), "", f"Best: `{best[0]}`, α = {best[1]:g} ({grid[best]['joint_ppl']:.3f}).", ""]
    if args.test_summary:
        report += ["## On test", "", args.test_summary.read_text().strip(), ""]
    (args.out / "report.md").write_text("\n".join(report))
    rows = [{"preset": p, "alpha": a, **{k: grid[(p, a)][k] for k in
                                         ("joint_ppl", "memory_ppl", "best_lambda", "memory_mass80",
                                          "trainable_parameters", "train_seconds")}} for p, a in sorted(grid)]
    (args.out / "results.json").write_text(json.dumps({"command": args.command, "backbone_ppl": backbone,
                                                       "best": {"preset": best[0], "alpha": best[1]},
                                                       "cells": rows}, indent=1) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
