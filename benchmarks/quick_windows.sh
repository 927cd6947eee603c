#!/usr/bin/env bash
# The quick demo with its former windows (512 tokens, stride 256) against its current ones (1024, stride 768),
# each from scratch, one after the other on an otherwise idle machine: end-to-end wall seconds and every stage's
# time and quality (docs/results/quick-windows; README "How long it takes").
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mlpmem
OUT=docs/results/quick-windows
mkdir -p "$OUT"
# measured with the memory the quick preset had then (`small`, α = 0.4; now `tiny`, α = 0.2: quick_recipe.sh)
OLD="--set memory.preset=small --set train.alpha=0.4"
declare -A SETS=([quick-w512]="$OLD --set corpus.block_size=512 --set corpus.stride=256" [quick-w1024]="$OLD")
echo "{" > "$OUT/walltimes.json.tmp"
sep=""
for name in quick-w512 quick-w1024; do
  rm -rf "runs/$name"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  $M demo --set run_dir="runs/$name" ${SETS[$name]} --quiet > "runs/$name.log" 2>&1
  t1=$(date +%s.%N)
  printf '%s "%s": %.1f\n' "$sep" "$name" "$(echo "$t1 - $t0" | bc)" >> "$OUT/walltimes.json.tmp"
  sep=","
done
echo "}" >> "$OUT/walltimes.json.tmp" && mv "$OUT/walltimes.json.tmp" "$OUT/walltimes.json"
$M summarize runs/quick-w512 runs/quick-w1024 --out "$OUT/summary.md" --copy-reports "$OUT"
