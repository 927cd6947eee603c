"""``python -m memory_mosaics``: the ``memory-mosaics`` command line."""

from memory_mosaics.cli import main

raise SystemExit(main())
