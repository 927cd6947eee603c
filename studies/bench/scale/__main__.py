"""Worker entry: ``python -m studies.bench.scale WORKER ARGS`` (alone or under accelerate launch)."""

import sys

from studies.bench.scale.workers import main

main(sys.argv[1:])
