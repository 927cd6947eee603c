"""Worker entry: ``python -m mlpmem.experiments.bench.scale WORKER ARGS`` (alone or under accelerate launch)."""

import sys

from mlpmem.experiments.bench.scale.workers import main

main(sys.argv[1:])
