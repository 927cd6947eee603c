"""``python -m mlpmem.cli`` (as ``accelerate launch`` and ``torchrun`` start the stages): the ``mlpmem`` command."""

import sys

from mlpmem.cli import main

sys.exit(main())
