#!/usr/bin/env bash
# Regenerates every report in docs/results/ (docs/results.md lists them) at the shipped recipe. On 2 CPU cores the
# pipeline runs take about two hours, the ablations, QA and the maintenance study several more; each block can be
# run alone. Every command is idempotent: rerun, it reuses finished stages and resumes interrupted ones.
# Timings depend on the machine: run on an otherwise idle one, and compare timings only within one report.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD
M=.venv/bin/mlpmem
S=".venv/bin/python -m studies"
R=docs/results
mkdir -p runs

# docs/results/quick: `make demo` from scratch, timed end to end (walltime.json), and its run's report
bash benchmarks/demo_walltime.sh quick $R/quick
$M summarize runs/quick --copy-reports $R

# docs/results/default: the full default (`make demo MODE=full`)
$M run default
$M summarize runs/default --copy-reports $R

# docs/results/wikipedia-by-article: the negative control
$M run wikipedia-by-article
$M summarize runs/wikipedia-by-article --copy-reports $R

# docs/results/gate: the learned gate on the full default, decode timed on one thread
MLPMEM_THREADS=1 $M gate default --decode-tokens 16 --decode-rounds 21 --report $R/gate --quiet

# docs/results/default-ablations: the recipe's studies on the full default's datastore and teacher
A=$R/default-ablations
$S ablate default --study size --out $A/size-recipe --quiet
$S ablate default --study layer --variant layer=0.8 --variant layer=1.0 --out $A/layer --quiet
$S ablate default --study teacher --out $A/teacher-recipe --quiet
$S ablate default --study seeds --out $A/seeds --quiet
$S ablate default --study distil --out $A/distil --quiet   # reads the seeds study's memories

# docs/results/qa-core: the report's questions for the backbone and its memory alone (its own runs/qa-core), every
# stage at fp32 (what `precision: auto` is on a CPU without native bf16); qa-core-bf16: the same call as shipped
FP32=(--set generation.precision=fp32 --set battery.precision=fp32
      --set 'benchmarks.halueval_qa.pipeline_set=[backbone.precision=fp32,train.precision=fp32]')
$S qa report studies/qa/configs/core.yaml "${FP32[@]}"
$S qa report studies/qa/configs/core.yaml --set out_dir=runs/qa-core-bf16 --set docs_dir=$R/qa-core-bf16
# docs/results/qa-rag: dense RAG beside them on HaluEval detection (QA, dialogue: the paper's RAG columns) and
# closed-book preference (the same runs/qa-core: the backbone's and the memory's files are read, not scored again)
$S qa report studies/qa/configs/core.yaml "${FP32[@]}" --set docs_dir=$R/qa-rag \
  --set 'methods=[backbone,memory,rag-dense]' \
  --set 'battery.methods=[backbone,memory,rag-dense]' \
  --set 'battery.tasks=[mlpmem_halueval_detect_qa,mlpmem_halueval_detect_dialogue,mlpmem_halueval_prefer]'
# docs/results/qa: the QA suite on data that installs from the registries
$S qa report studies/qa/configs/report.yaml
# docs/results/qa-gate: the question-trained gate against the fixed λ (the same runs/qa, three methods)
$S qa report studies/qa/configs/report.yaml --set docs_dir=$R/qa-gate --set 'methods=[backbone,memory,memory-gate]' \
  --set gate_training=questions --set gate_negatives=200 --set gate_negatives_unconditional=true \
  --set 'gate_offset_grid=[-3.0,0.0,3.0]' --set gate_offset_rule=one_se \
  --set 'gate_floor_grid=[0.0,0.2,0.4]' --set gate_floor_rule=one_se \
  --set 'battery.methods=[backbone,memory,memory-gate]' --set battery.detect_limit=0 \
  --set 'battery.tasks=[mlpmem_battery,mlpmem_halueval_prefer]' --set 'no_regression.methods=[backbone,memory,memory-gate]'
# docs/results/qa-curve: the QA memory's learning curve (reads the report's datastore and teacher)
$S qa curve studies/qa/configs/report.yaml --epochs 10 --lambdas 0.2,0.35 --docs $R/qa-curve --quiet
# docs/results/tasks-catalog: the BIG-bench catalog, only from a copy of its archive (PyPI no longer serves it)
if [ -n "${MLPMEM_BIGBENCH_ARCHIVE:-}" ]; then $S tasks list --all --out $R/tasks-catalog; fi

# docs/results/update: the maintenance table from scratch
$S update-study studies/update/configs/study-480.yaml --out runs/update-study-480 --quiet

# docs/results/precision-avx2: bf16 against fp32 on a CPU without native bf16 (run on such a CPU; the report joins
# the two reports these commands write)
sed 's/precision: auto/precision: bf16/g' src/mlpmem/configs/quick.yaml > runs/quick-bf16.yaml
$S bench offline runs/quick-bf16.yaml --train-tokens 3000 --train-steps 10 --teacher-queries 0 --repeats 2 \
  --out runs/bench/offline-bf16 --quiet
$S bench offline quick --out runs/bench/offline-avx2 --teacher-queries 0 --quiet

# docs/results/teacher-lists: the offline stages on a capped slice, the teacher's search list by list
$S bench offline quick --quiet --repeats 1 --train-tokens 3000 --train-steps 4 --teacher-queries 16384 \
  --out runs/bench/offline-quick-lists
cp runs/bench/offline-quick-lists/bench-report.md $R/teacher-lists/report.md
cp runs/bench/offline-quick-lists/bench-results.json $R/teacher-lists/results.json

# docs/results/scale: processes, peak memory against datastore and corpus size, resume, DDP against FSDP
$S bench scale quick --tokens 4096 --sizes 60000,240000 --train-steps 30 --out runs/scale-idle --docs $R/scale
$S bench scale quick --tokens 0 --sizes '' --corpus-repeats 4,16 --out runs/scale-idle --docs $R/scale
$S bench scale quick --tokens 0 --sizes '' --corpus-repeats '' --shard-steps 10 --shard-width 4096 \
  --out runs/scale-idle --docs $R/scale

# docs/results/lm-eval-one-pass: the battery's one backbone pass timed against one method at a time and against
# every context shared (on qa-core's run and tasks, written above)
$S bench lm-eval runs/qa-core/halueval_qa/memory-run --methods backbone,memory --limit 10 --repeats 2 \
  --threads 2 --tasks-dir runs/qa-core/battery/tasks \
  --tasks mlpmem_battery,mlpmem_halueval_detect,mlpmem_halueval_prefer --one-pass-only
# docs/results/breakeven: offline cost against per-request cost at three corpus sizes (alone on an idle machine)
$S bench breakeven quick --sizes 6000,40000,200000 --finetune none --search-keys 10000000 --docs $R/breakeven \
    --quiet
# docs/results/infer-limit: TTFT and decode at their limits, on the breakeven's 40k-token run
$S bench infer runs/bench/breakeven/runs/train-40000/config.yaml --methods backbone,memory --batch-sizes 1 \
  --repeats 21 --warmup 2 --no-ladder --out $R/infer-limit --quiet

# docs/results/mosaics*: Memory Mosaics v2 against a matched Transformer, and an MLP Memory on top of each
MM=.venv/bin/memory-mosaics
C=src/memory_mosaics/configs
for c in small hour hour-more-text; do $MM train $C/$c.yaml; $MM eval $C/$c.yaml; done
for c in small hour; do $MM memory $C/$c.yaml; done
$MM recall --out $R/mosaics-recall

# docs/results/gpu-check needs a GPU: benchmarks/gpu_check.sh on the GPU machine, then
# python benchmarks/gpu_check_report.py (the report names both commands).
