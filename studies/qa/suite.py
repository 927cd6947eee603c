"""The whole QA comparison from scratch: every benchmark and method, the no-regression checks, the ablations.

For each benchmark (``halueval_qa`` in the preset) :mod:`studies.qa.runner` prepares the data, runs the
project's pipeline on its corpus and scores every method (backbone, RAG dense / BM25 over the same corpus, kNN-LM
on the run's datastore, CPT and LoRA trained on the same corpus, MLP Memory with a fixed λ and with the gate) on
the same questions. The no-regression checks (:mod:`studies.qa.no_regression`) run on the models of one benchmark
(``no_regression.memory_from``), and with a ``battery`` section also through lm-eval on the installable battery,
HaluEval's detection and closed-book preference (:mod:`studies.qa.battery`); the ablations
(:mod:`studies.qa.ablations`) on their own pipeline config. Everything lands in ``out_dir/results.json``; the
report (:mod:`studies.qa.report`) is written from it.

A computing call resolves ``precision: auto`` (generation and battery) once, on the machine it runs on
(:func:`machine_precision`): every method file then records the precision it was computed at, so a later call on a
machine that resolves it otherwise computes the methods again instead of pairing bf16 scores with fp32 ones.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from mlpmem.backbone import load_backbone
from mlpmem.compute import compute_device, model_device, resolve_precision
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import read_json, write_json
from studies.bench.infer.measure import machine
from studies.qa.ablations import run_ablations
from studies.qa.battery import collect_battery, run_battery
from studies.qa.config import QASuiteConfig
from studies.qa.runner import collect_benchmark, run_benchmark


def run_suite(cfg: QASuiteConfig, progress: bool = True, compute: bool = True) -> dict:
    """Every benchmark, method, check and ablation of ``cfg``; returns (and writes) ``out_dir/results.json``.

    ``compute=False`` only collects what earlier runs finished (a report of an interrupted suite).
    """
    set_threads()
    calls = _Calls(Path(cfg.out_dir) / CALLS) if compute else None
    backbone = load_backbone(cfg.backbone) if compute else None
    cfg = machine_precision(cfg, model_device(backbone)) if compute else recorded_precision(cfg)
    results = {"benchmarks": {}, "config": _config_dict(cfg)}
    for name in cfg.benchmarks:
        bench = run_benchmark(cfg, name, backbone, progress) if compute else collect_benchmark(cfg, name)
        if bench is not None:
            results["benchmarks"][name] = bench
        write_json(Path(cfg.out_dir) / "results.json", results)
    results["ablations"] = run_ablations(cfg, backbone, progress, train=compute and cfg.ablations is not None)
    results["battery"] = run_battery(cfg, progress) if compute and cfg.battery else collect_battery(cfg)
    if calls is not None:
        calls.finish()
    results["calls"] = _Calls.read(Path(cfg.out_dir) / CALLS)
    write_json(Path(cfg.out_dir) / "results.json", results)
    return results


CALLS = "calls.json"
"""The suite's log of the calls that computed (each one's start and wall seconds), in ``out_dir``."""


class _Calls:
    """Records one computing call of the suite: an entry when it starts (``seconds`` None until it finishes, so a
    call that stopped half-way stays visible; the ``machine`` it ran on) and its wall seconds when it ends."""

    def __init__(self, path: Path):
        self.path, self.t0 = path, time.perf_counter()
        self.entries = self.read(path) + [{"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                           "seconds": None, "machine": machine(torch.get_num_threads(),
                                                                               compute_device())}]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, self.entries)

    def finish(self) -> None:
        self.entries[-1]["seconds"] = time.perf_counter() - self.t0
        write_json(self.path, self.entries)

    @staticmethod
    def read(path: Path) -> list[dict]:
        return read_json(path, "suite calls") if path.is_file() else []


def machine_precision(cfg: QASuiteConfig, device) -> QASuiteConfig:
    """``cfg`` with its ``auto`` precisions resolved to what the device each runs on computes natively (bf16 on
    AVX512-BF16 / AMX CPUs and bf16 GPUs, fp32 where bf16 is emulated): ``generation`` on ``device`` (the
    backbone's), ``battery`` on the device lm-eval scores on (:func:`~mlpmem.compute.compute_device`)."""
    devices = {"generation": device, "battery": compute_device()}
    return _with_precisions(cfg, lambda section, precision: resolve_precision(precision, devices[section]))


def recorded_precision(cfg: QASuiteConfig) -> QASuiteConfig:
    """``cfg`` with its ``auto`` precisions as the last computing call resolved them (``out_dir/results.json``), so
    that a report written without computing records what its numbers were computed at; ``auto`` stays where no
    call recorded one."""
    path = Path(cfg.out_dir) / "results.json"
    recorded = read_json(path, "suite results").get("config", {}) if path.is_file() else {}
    return _with_precisions(cfg, lambda section, precision: (recorded.get(section) or {}).get("precision", precision)
                            if precision == "auto" else precision)


def _with_precisions(cfg: QASuiteConfig, resolve) -> QASuiteConfig:
    """``cfg`` with ``resolve(section, precision)`` as the precision of ``generation`` and (if any) ``battery``."""
    generation = dataclasses.replace(cfg.generation, precision=resolve("generation", cfg.generation.precision))
    battery = cfg.battery and dataclasses.replace(cfg.battery, precision=resolve("battery", cfg.battery.precision))
    return dataclasses.replace(cfg, generation=generation, battery=battery)


def _config_dict(cfg: QASuiteConfig) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
