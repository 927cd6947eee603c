"""``python -m studies <words>``: the studies' command line (:mod:`studies.cli`), run from the repository's root."""

import sys

from studies.cli import main

sys.exit(main())
