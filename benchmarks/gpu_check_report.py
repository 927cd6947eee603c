"""The report of the GPU checks (``benchmarks/gpu_check.sh``) run on lent machines: ``report.md`` and
``results.json`` in ``--out`` from the folders the runs sent back, in the order they ran.

    python benchmarks/gpu_check_report.py RUN_DIR [RUN_DIR ...] --out docs/results/gpu-check

A folder holds what one run of the script wrote to ``$OUT``: ``machine.txt``, ``stages.txt`` (``NAME rc=N
seconds=S`` per stage), optionally ``pytest-summary.txt``, ``results.tar.gz`` (the quick run's ``timings.json``)
and ``infer.log`` (the decode benchmark's table). Quality figures of the random backbone are never read.
"""

import argparse
import json
import re
import shutil
import tarfile
from pathlib import Path

STAGE = re.compile(r"^(\w+) rc=(\d+) seconds=(\d+)$")


def read_run(folder: Path) -> dict:
    run = {"folder": folder.name, "machine": (folder / "machine.txt").read_text().strip().splitlines()}
    run["stages"] = {m[1]: {"rc": int(m[2]), "seconds": int(m[3])}
                     for m in map(STAGE.match, (folder / "stages.txt").read_text().splitlines()) if m}
    summary = folder / "pytest-summary.txt"
    if summary.exists():
        lines = summary.read_text().splitlines()
        run["pytest_failed"] = sorted({line.split()[1] for line in lines if line.startswith("FAILED")})
    archive = folder / "results.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("quick-gpu/timings.json")), None)
            if member is not None:
                run["timings"] = json.load(tar.extractfile(member))
    if (folder / "infer.log").exists():
        text = (folder / "infer.log").read_text().strip().splitlines()
        run["infer_report"] = [line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in text]
    return run


def stage_rows(runs: list[dict]) -> list[str]:
    names = sorted({s for r in runs for s in r["stages"]}, key=["run", "offline", "infer", "pytest"].index)
    rows = ["| device run | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for i, r in enumerate(runs, 1):
        cells = [f"{'ok' if s['rc'] == 0 else 'failed' if s['rc'] != 124 else 'timed out'} ({s['seconds']} s)"
                 if (s := r["stages"].get(n)) else "—" for n in names]
        rows.append(f"| {i} | " + " | ".join(cells) + " |")
    return rows


def throughput_rows(timings: dict) -> list[str]:
    keys, teacher, train = timings["keys_train"], timings["teacher"], timings["train"]
    return ["| stage | tokens | seconds | tokens/s |", "|---|---|---|---|",
            f"| key extraction (datastore) | {keys['tokens']:,} | {keys['seconds']:.1f} | "
            f"{keys['tokens_per_s']:,.0f} |",
            f"| teacher (FAISS on the CPU) | {teacher['tokens']:,} | {teacher['seconds']:.1f} | "
            f"{teacher['tokens_per_s']:,.0f} |",
            f"| memory training ({train['precision']}) | {train['tokens']:,} | {train['seconds']:.1f} | "
            f"{train['tokens_per_s']:,.0f} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--note", action="append", default=[], help="a line under the stage table (repeatable)")
    args = parser.parse_args()
    runs = [read_run(folder) for folder in args.runs]
    timed = next((r for r in reversed(runs) if "timings" in r), None)
    infer = next((r for r in reversed(runs) if "infer_report" in r), None)
    lines = ["# The GPU path on a lent H200", "",
             "`bash benchmarks/gpu_check.sh` on the lent machine (each run a fresh copy of the tree), then "
             f"`python benchmarks/gpu_check_report.py {' '.join(str(r) for r in args.runs)} --out {args.out}`. "
             "The backbone is a random model of SmolLM2-135M's shape with its tokenizer "
             "(`benchmarks/random_backbone.py`: the shipped weights are larger than what travels to that machine), so "
             "only speed and whether each path runs are measured here; no quality figure of it is reported.", "",
             "Machine: " + "; ".join(runs[-1]["machine"]), "", "## Which stages ran, run after run", "",
             *stage_rows(runs), ""]
    for i, r in enumerate(runs, 1):
        if "pytest_failed" in r:
            lines.append(f"- run {i}: {len(r['pytest_failed'])} tests failed in the part of the suite that ran.")
    lines += [f"- {note}" for note in args.note]
    if timed:
        lines += ["", "## Quick pipeline stages on the GPU (the `quick` preset, 40k training tokens)", "",
                  *throughput_rows(timed["timings"]), "",
                  "The quick preset extracts keys in batches of 4 windows and trains 94 steps: sizes for 2 CPU cores, "
                  "far too small to load an H200; the figures are what a user gets from that preset there."]
    if infer:
        lines += ["", "## Decode speed on the GPU (`python -m studies bench infer`, same run, side by side)", "",
                  *infer["infer_report"]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    (args.out / "results.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    for i, folder in enumerate(args.runs, 1):  # the raw files beside the report
        for name in ("machine.txt", "stages.txt", "infer.log"):
            if (folder / name).exists():
                shutil.copy(folder / name, args.out / f"run{i}-{name}")
    print(f"report: {args.out / 'report.md'}")


if __name__ == "__main__":
    main()
