"""``python -m studies <words>``: the studies' command line (:mod:`studies.cli`), run from the repository's root."""

import sys

from mlpmem.cli.spec import run
from studies.cli import PROGRAM

sys.exit(run(PROGRAM))
