#!/usr/bin/env bash
# Regenerates every result quoted in README.md and docs/ (2 cores: about 2 hours in all).
# Each command is idempotent: rerun, it reuses finished stages and resumes interrupted ones.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mlpmem
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "$name demo wall seconds: $((SECONDS - t0))" >> runs/demo-walltimes.txt; }
mkdir -p runs && rm -f runs/demo-walltimes.txt
timed full $M demo --mode full                    # Shakespeare by play: the default (configs/default.yaml)
timed quick $M demo --mode quick                  # the quick demo (configs/quick.yaml)
$M run configs/wikipedia-by-article.yaml          # negative control: the backbone already knows Wikipedia
for s in datastore knnlm; do $M $s configs/wikipedia-within-article.yaml; done
# the default with the blocks initialised from the backbone, on the default's datastore and teacher (hard links)
mkdir -p runs/default-init-backbone
cp -al runs/default/{datastore,eval,teacher,knnlm} runs/default-init-backbone/ 2>/dev/null || true
$M run configs/default.yaml --set run_dir=runs/default-init-backbone --set memory.init=backbone
# tied/untied head x backbone/random init (README's table: measured at commit 57bcc69, fp32 passes)
$M ablate configs/quick.yaml --study head-init --set train.epochs=1
$M summarize runs/default runs/wikipedia-within-article runs/wikipedia-by-article runs/quick \
  --out docs/results/summary.md --copy-reports docs/results
# runs/default-fp32-init-backbone is `mlpmem run configs/default.yaml` at commit 57bcc69 (fp32, backbone init)
if [ -d runs/default-fp32-init-backbone ]; then
  $M summarize runs/default runs/default-init-backbone runs/default-fp32-init-backbone \
    --out docs/results/init-precision/summary.md
fi
