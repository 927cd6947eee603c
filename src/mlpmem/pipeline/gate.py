"""The gate of a finished run: train λ_t on validation, compare it with the fixed λ on test.

``mlpmem gate CONFIG`` (:func:`stage_gate`) reads a finished run (memory, evaluation keystores, ``results.json``
for the validation-chosen fixed λ) and writes only ``run_dir/gate/``:

    gate/gate.json, gate.safetensors   the gate, bound to the run's memory by its checksum
    gate/features-<split>.npz          the cached per-position features and log p_mem(target)
    gate/results.json, report.md, lambda_hist.png   fixed λ vs gate on test, λ_t on test

Training reads the validation split only (:func:`train_run_gate`); the test split is read afterwards, to score
(:func:`score_gate`). The features need the backbone's whole distribution at every position, which the
keystores do not hold: it is recomputed over the split's windows exactly as the keystore was built (its
manifest's block, stride, batch size and precision); the targets' log p_lm and the keys come from the
keystore, so the fixed-λ perplexity here is the evaluation's own number.

The stage locks ``gate/`` only, not the run folder: it reads finished artifacts (the memory is checked by its
checksum) and writes nothing else, so it may run beside another command on the same run.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from mlpmem.backbone import base_model, output_logits
from mlpmem.compute import autocast, model_device
from mlpmem.corpora.documents import corpus_hash, document_lengths, make_windows
from mlpmem.datastore import KeyStore, pad_windows
from mlpmem.errors import CorruptArtifact, MlpmemError
from mlpmem.inference.gate import (
    FEATURE_VERSION,
    FEATURES,
    NUM_FEATURES,
    gate_features,
)
from mlpmem.inference.gate_io import memory_checksum, save_gate
from mlpmem.inference.mixing import mix
from mlpmem.inference.perplexity import perplexity
from mlpmem.memory import MLPMemory
from mlpmem.pipeline import records
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.run import Run
from mlpmem.reporting.gate_report import write_gate_report
from mlpmem.training.data import memory_logprobs
from mlpmem.training.gate import GateData, GateTrainConfig, train_gate
from mlpmem.utils.lock import folder_lock
from mlpmem.utils.shards import read_json, temporary

Measure = Callable[[Run, MLPMemory, object, float], dict]
"""More measurements of a trained gate ``(run, memory, gate, fixed λ) -> fields`` added to its entry (the
speed study times its decode with one)."""

FEATURE_ROWS = 256
"""Positions whose two full distributions are held at once while computing features."""


def features_path(run: Run, split: str) -> Path:
    return run.layout.gate / f"features-{split}.npz"


def _fingerprint(store: KeyStore, memory_sha: str) -> str:
    shards = [s["files"][name]["sha256"] for s in store.manifest["shards"] for name in ("keys", "values", "lm")]
    return "|".join([",".join(FEATURES), str(FEATURE_VERSION), memory_sha, *shards])


def _scored_rows(windows) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of the scored positions of a batch of right-padded windows, in keystore order."""
    rows = [torch.full((w.num_scored,), b) for b, w in enumerate(windows)]
    cols = [torch.arange(w.positions.start, w.positions.stop) for w in windows]
    return torch.cat(rows), torch.cat(cols)


@torch.no_grad()
def compute_features(run: Run, memory: MLPMemory, split: str, store: KeyStore) -> tuple[np.ndarray, float]:
    """Features (n, F) of every scored position of ``split``, and the largest |Δ log p_lm(target)| between the
    recomputed backbone and the keystore (a check that the rows line up: rounding-sized when they do)."""
    manifest, model = store.manifest, run.backbone[0]
    docs = split_tokens(run, split)
    if manifest["corpus_sha"] != corpus_hash(docs):
        raise CorruptArtifact(f"keystore {store.path} was built from other {split} tokens: rerun the datastore stage")
    windows = make_windows(document_lengths(docs), manifest["block_size"], manifest["stride"])
    if windows.num_scored != store.num_rows:
        raise CorruptArtifact(f"keystore {store.path}: {store.num_rows} rows for {windows.num_scored} positions")
    keys, targets, lp_lm = store.array("keys"), store.array("values"), store.array("lm")
    out, worst, row = np.empty((store.num_rows, NUM_FEATURES), np.float32), 0.0, 0
    param = next(memory.parameters())
    for first in range(0, len(windows), manifest["batch_size"]):
        batch = windows[first : first + manifest["batch_size"]]
        ids, mask = pad_windows(docs, batch, device=model_device(model))  # (B, T)
        with autocast(model, manifest["precision"]):
            hidden = base_model(model)(input_ids=ids, attention_mask=mask, use_cache=False)[0]  # (B, T, d)
        hidden = hidden[_scored_rows(batch)]  # (M, d)
        for c in range(0, hidden.shape[0], FEATURE_ROWS):
            lm = output_logits(model, hidden[c : c + FEATURE_ROWS]).float()  # (m, V)
            rows = slice(row + c, row + c + lm.shape[0])
            mem = memory(torch.from_numpy(np.asarray(keys[rows], np.float32)).to(param)).float()  # (m, V)
            out[rows] = gate_features(lm, mem.to(lm.device)).cpu().numpy()
            tgt = torch.from_numpy(np.asarray(targets[rows], np.int64)).to(lm.device)
            lp = (lm.gather(1, tgt[:, None])[:, 0] - torch.logsumexp(lm, -1)).cpu()  # (m,)
            worst = max(worst, float((lp.double() - torch.from_numpy(lp_lm[rows].astype(np.float64))).abs().max()))
        row += hidden.shape[0]
    return out, worst


def split_data(run: Run, memory: MLPMemory, split: str, memory_sha: str, with_keys: bool) -> tuple[GateData, dict]:
    """The gate's data for ``split`` (features cached in ``gate/features-<split>.npz``) and how it was obtained."""
    store = KeyStore(run.layout.keystore(split))
    store.check_backbone(*run.backbone)
    fingerprint, path = _fingerprint(store, memory_sha), features_path(run, split)
    cached = _read_cache(path, fingerprint)
    if cached is None:
        started = time.perf_counter()
        features, worst = compute_features(run, memory, split, store)
        lp_mem = memory_logprobs(memory, store.array("keys"), store.array("values"))
        info = {"cached": False, "seconds": time.perf_counter() - started, "max_abs_dlogp_lm": worst}
        _write_cache(path, fingerprint, features, lp_mem, info)
    else:
        features, lp_mem, info = cached
        info = {**info, "cached": True}
    keys = torch.from_numpy(np.asarray(store.array("keys"), np.float32)) if with_keys else None
    data = GateData(torch.from_numpy(features), torch.from_numpy(store.array("lm").astype(np.float64)),
                    torch.from_numpy(lp_mem), keys)
    return data, info


def _read_cache(path: Path, fingerprint: str) -> tuple[np.ndarray, np.ndarray, dict] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as cache:
            if str(cache["fingerprint"]) != fingerprint:
                return None
            info = {"seconds": float(cache["seconds"]), "max_abs_dlogp_lm": float(cache["max_abs_dlogp_lm"])}
            return cache["features"], cache["lp_mem"], info
    except (OSError, ValueError, KeyError):
        return None  # an unreadable cache is recomputed


def _write_cache(path: Path, fingerprint: str, features: np.ndarray, lp_mem: np.ndarray, info: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, fingerprint=np.array(fingerprint), features=features, lp_mem=lp_mem,
             seconds=np.array(info["seconds"]), max_abs_dlogp_lm=np.array(info["max_abs_dlogp_lm"]))
    tmp = temporary(path)
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)


def fixed_lambda(run: Run) -> float:
    """The fixed λ the run's evaluation chose on validation (refused if it scored another memory)."""
    results = read_json(run.layout.results, "run results (run `mlpmem eval` first)")
    if not records.results_match_memory(run):
        raise MlpmemError(f"{run.layout.results} was computed for another memory than {run.layout.memory}: "
                          f"run `mlpmem eval {run.config_file or 'CONFIG'}` first")
    return float(results["lambda"])


def load_run_memory(run: Run) -> MLPMemory:
    records.verify_memory(run)
    model, tokenizer = run.backbone
    return MLPMemory.from_pretrained(run.layout.memory, backbone_model=model, backbone_tokenizer=tokenizer).eval()


def train_run_gate(run: Run, memory: MLPMemory, config: GateTrainConfig, lam: float) -> tuple:
    """Train the gate on the validation split (only), save it to ``gate/``; return (gate, summary)."""
    memory_sha = memory_checksum(memory)
    data, info = split_data(run, memory, "validation", memory_sha, config.key_dim > 0)
    gate, summary = train_gate(data, config, lam, memory.config.input_size)
    summary = {**summary, "split": "validation", "features": info}
    save_gate(gate, run.layout.gate, memory, {"train": {k: v for k, v in summary.items() if k != "history"},
                                               "train_config": config.to_dict()})
    return gate, summary


@torch.no_grad()
def score_gate(run: Run, memory: MLPMemory, gate, lam: float, split: str = "test") -> dict:
    """Perplexity of ``split`` with the fixed λ and with the gate, and the gate's λ_t there."""
    data, info = split_data(run, memory, split, memory_checksum(memory), gate.uses_keys)
    z = gate(data.features, data.keys)  # (n,)
    lam_t = torch.sigmoid(z)
    fixed = mix(data.lp_lm, data.lp_mem, lam, logits=False)  # (n,) as the evaluation's lambda curve computes it
    covered = torch.isfinite(data.lp_mem)
    return {"ppl_backbone": perplexity(data.lp_lm), "ppl_fixed": perplexity(fixed),
            "ppl_gate": perplexity(mix(data.lp_lm.double(), data.lp_mem.double(), z, logits=False)),
            "lambda_fixed": lam,
            "mean_gate": lam_t.mean().item(), "mean_gate_covered": lam_t[covered].mean().item(),
            "mean_gate_uncovered": lam_t[~covered].mean().item() if (~covered).any() else None,
            "tokens": len(data), "features": info, "lambda_t": lam_t.numpy(), "lp_mem": data.lp_mem.numpy()}


def examples(run: Run, test: dict, split: str = "test", count: int = 8, context: int = 10) -> dict:
    """The ``count`` positions of ``split`` where the gate opens most and least: λ_t, the preceding tokens (the
    keystore's earlier targets), the target, and its p_lm / p_mem."""
    store, tokenizer = KeyStore(run.layout.keystore(split)), run.backbone[1]
    targets, lam_t = store.array("values"), test["lambda_t"]
    data_lp_lm, data_lp_mem = store.array("lm"), test["lp_mem"]
    order = np.argsort(lam_t, kind="stable")

    def row(i: int) -> dict:
        return {"lambda": float(lam_t[i]), "context": tokenizer.decode(targets[max(0, i - context) : i].tolist()),
                "target": tokenizer.decode([int(targets[i])]), "p_lm": float(np.exp(data_lp_lm[i])),
                "p_mem": float(np.exp(data_lp_mem[i]))}

    return {"open": [row(int(i)) for i in order[::-1][:count]], "closed": [row(int(i)) for i in order[:count]]}


def stage_gate(run: Run, config: GateTrainConfig, rebuild: bool = False, measure: Measure | None = None) -> dict:
    """Train the run's gate on validation, score it against the fixed λ on test.

    Returns this run's entry of the gate results (``ppl_fixed``, ``ppl_gate``, ``mean_gate``, ..., and what
    ``measure`` adds) plus ``lambda_t`` (the test λ_t, for the histogram) and ``examples``.
    """
    memory = load_run_memory(run)
    lam = fixed_lambda(run)
    if rebuild:
        for split in ("validation", "test"):
            features_path(run, split).unlink(missing_ok=True)
    gate, summary = train_run_gate(run, memory, config, lam)
    test = score_gate(run, memory, gate, lam)
    speed = measure(run, memory, gate, lam) if measure is not None else {}
    entry = {k: v for k, v in test.items() if k not in ("lambda_t", "lp_mem")}
    entry.update(run_dir=str(run.dir), corpus=run.cfg.corpus.name or run.cfg.corpus.path, gate=config.to_dict(),
                 train={k: v for k, v in summary.items() if k != "history"}, history=summary["history"], **speed)
    return {**entry, "lambda_t": test["lambda_t"], "examples": examples(run, test)}


def gate_with_report(run: Run, name: str, command: str, folders=(), rebuild: bool = False,
                     measure: Measure | None = None) -> dict:
    """:func:`stage_gate` under the gate folder's lock, its report written to ``run_dir/gate/`` and to ``folders``;
    returns the entry without its per-position λ_t."""
    with folder_lock(run.layout.gate, command):
        entry = stage_gate(run, run.cfg.gate, rebuild, measure)
        lambda_t = entry.pop("lambda_t")
        for folder in [run.layout.gate, *folders]:
            write_gate_report(folder, name, entry, lambda_t, command)
    return entry
