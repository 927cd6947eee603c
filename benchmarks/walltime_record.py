"""walltime.json for a timed command: wall seconds, GNU time's peak RSS, the machine, the run's stage times."""

import argparse
import json
import os
import re
from pathlib import Path

from mlpmem.compute import cpu_has_native_bf16
from studies.bench.infer.measure import machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("--command", "--time-log", "--run", "--out", "--note"):
        ap.add_argument(name, required=name != "--note")
    ap.add_argument("--start", type=int, required=True)
    ap.add_argument("--end", type=int, required=True)
    args = ap.parse_args()
    log = Path(args.time_log).read_text(errors="replace")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
    timings = json.loads((Path(args.run) / "timings.json").read_text())
    host = {**machine(os.cpu_count()), "native_bf16": cpu_has_native_bf16()}  # the bench commands' description
    record = {"command": args.command, "wall_s": args.end - args.start,
              "max_rss_mb": int(rss.group(1)) / 1024 if rss else None, "machine": host,
              "stage_seconds": {stage: t["seconds"] for stage, t in timings.items()}}
    if args.note:
        record["note"] = args.note
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
