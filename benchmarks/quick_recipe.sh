#!/usr/bin/env bash
# The quick run's memory recipe: depth (`tiny`, `small`) against α (0.2, 0.4), validation PPL, every memory trained
# on the datastore and teacher of the quick run at its earlier recipe (`small`, α = 0.4, runs/quick-small-a04).
# configs/quick.yaml took `tiny` with α = 0.2 from it (docs/results/quick-recipe), and the two recipes on test.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mlpmem
OUT=docs/results/quick-recipe
OLD="--set memory.preset=small --set train.alpha=0.4 --set run_dir=runs/quick-small-a04"
REUSE=$([ -f runs/quick/stages/teacher.json ] && echo "--reuse-from runs/quick" || true)
# shellcheck disable=SC2086
$M run configs/quick.yaml $OLD $REUSE --quiet
# shellcheck disable=SC2086
{
  $M ablate configs/quick.yaml $OLD --quiet --study size --variant small --out $OUT/small-alpha04
  $M ablate configs/quick.yaml $OLD --quiet --study size --variant tiny --variant small --set train.alpha=0.2 \
    --out $OUT/size-alpha02
  $M ablate configs/quick.yaml $OLD --quiet --study alpha --variant alpha=0.2 --variant alpha=0.4 \
    --set memory.preset=tiny --out $OUT/alpha-tiny
  $M summarize runs/quick-small-a04 --out $OUT/quick-small-a04-summary.md --copy-reports $OUT
}
# on test: the earlier recipe's run against the quick demo's (configs/quick.yaml as it is)
[ -f runs/quick/stages/eval.json ] || $M run configs/quick.yaml --quiet
$M summarize runs/quick-small-a04 runs/quick --out $OUT/test-summary.md
.venv/bin/python benchmarks/recipe_grid.py $OUT/small-alpha04 $OUT/size-alpha02 $OUT/alpha-tiny --out $OUT \
  --test-summary $OUT/test-summary.md --command "bash benchmarks/quick_recipe.sh"
