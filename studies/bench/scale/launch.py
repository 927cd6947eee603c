"""Starting the benchmark's workers: one process, or several under ``accelerate launch``; reading their results."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

WORKER_MODULE = "studies.bench.scale"
"""Run with ``python -m``: its ``__main__`` dispatches to :mod:`.workers`."""


def free_port() -> int:
    """A TCP port on localhost that is free now (for the launcher's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes: int, args: list[str], env: dict | None = None) -> tuple[float, list[dict]]:
    """Run ``python -m WORKER_MODULE <args>`` under accelerate launch; wall time and each rank's JSON."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(free_port()), "-m"] if processes > 1 else [sys.executable, "-m"]
    cmd = [*launcher, WORKER_MODULE, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, results(proc.stdout)


def run_worker(args: list[str]) -> dict:
    """Run one worker process (``python -m WORKER_MODULE <args>``) and return its result."""
    proc = subprocess.run([sys.executable, "-m", WORKER_MODULE, *args], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
    return results(proc.stdout)[0]


def results(stdout: str) -> list[dict]:
    """The ``RESULT {...}`` JSON objects that the workers printed (ranks may interleave on one line)."""
    return [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", stdout)]
