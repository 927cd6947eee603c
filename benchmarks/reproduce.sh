#!/usr/bin/env bash
# Regenerates every result quoted in README.md and docs/ (2 cores: about 2.5 hours in all).
# Each command is idempotent: rerun, it reuses finished stages and resumes interrupted ones.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mlpmem
$M run configs/default.yaml                       # Shakespeare by play: the default
$M run configs/wikipedia-by-article.yaml          # negative control: the backbone already knows Wikipedia
for s in datastore knnlm teacher; do $M $s configs/wikipedia-within-article.yaml; done
$M run configs/quick.yaml                         # the quick demo
$M ablate configs/quick.yaml --study head-init --set train.epochs=1  # tied/untied head x backbone/random init
$M summarize runs/default runs/wikipedia-within-article runs/wikipedia-by-article runs/quick \
  --out docs/results/summary.md --copy-reports docs/results
