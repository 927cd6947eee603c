"""The process's runtime: threads for torch and FAISS."""

from __future__ import annotations

import os

import faiss
import torch


def set_threads(n: int | None = None) -> int:
    """Use the cores of this process in torch and FAISS (or ``n``, or ``MLPMEM_THREADS``): all of them, or an
    equal share when ``torchrun``/``accelerate launch`` started several processes here (``LOCAL_WORLD_SIZE``)."""
    n = n or int(os.environ.get("MLPMEM_THREADS", "0"))  # an explicit cap, e.g. on a shared machine
    n = n or max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
    return n
