#!/usr/bin/env bash
# Time one demo end to end from scratch (`mlpmem demo --mode MODE`, GNU time) and write OUT/walltime.json: wall
# seconds, peak RSS, the machine (CPU model, cores, native bf16 or not) and the run's own stage times.
# Usage: bash benchmarks/demo_walltime.sh quick docs/results/quick
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?mode: quick or full}; OUT=${2:?output folder}
RUN=runs/$([ "$MODE" = full ] && echo default || echo quick)
export HF_HUB_OFFLINE=1
rm -rf "$RUN" && mkdir -p runs "$OUT"
start=$(date +%s)
/usr/bin/time -v .venv/bin/mlpmem demo --mode "$MODE" --quiet > "runs/demo-$MODE.log" 2>&1
end=$(date +%s)
PYTHONPATH=$PWD .venv/bin/python benchmarks/walltime_record.py --command "mlpmem demo --mode $MODE" --start "$start" --end "$end" \
  --time-log "runs/demo-$MODE.log" --run "$RUN" --out "$OUT/walltime.json"
