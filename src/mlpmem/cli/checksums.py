"""``mlpmem record-checksums FOLDER``: record the checksums of a memory whose record is missing, deliberately.

A run folder's or a saved model's memory is refused without ``memory.sha256.json`` (deleting it never turns the
check off). When the user knows the weights in ``memory/`` are the right ones, this command checks that they load
and hold finite values, then records their checksums; a record that exists is verified, never replaced.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from mlpmem.errors import MlpmemError
from mlpmem.layout import RunLayout
from mlpmem.pipeline.records import record_memory
from mlpmem.utils.checksums import recorded, sidecar, verify_folder
from mlpmem.utils.commit import recover
from mlpmem.utils.lock import folder_lock


def record_checksums(args: argparse.Namespace) -> None:
    folder = Path(args.folder)
    layout = RunLayout(folder)
    if not (layout.memory / "config.json").is_file():
        raise MlpmemError(f"{folder} holds no memory ({layout.memory / 'config.json'} is missing): give a run "
                          "folder or a saved memory-augmented model")
    is_run = layout.config.is_file()
    with folder_lock(folder, args.command_line) if is_run else contextlib.nullcontext():
        if is_run:
            recover(folder)
        if recorded(layout.memory) is not None:
            verify_folder(layout.memory, f"memory {layout.memory}")
            print(f"{sidecar(layout.memory)} is already recorded and the memory matches it: nothing to do")
            return
        files = record_memory(layout.memory)
    print(f"recorded {sidecar(layout.memory)}: " + ", ".join(f"{n} {d[:12]}…" for n, d in sorted(files.items())))
