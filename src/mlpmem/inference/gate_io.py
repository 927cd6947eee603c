"""Gate checkpoints: ``gate.json`` + ``gate.safetensors`` in a folder, bound to the memory they were trained with.

A gate's λ_t reads p_mem, so it is only meaningful next to the memory it was trained with. ``gate.json``
records the memory's checksum (:func:`memory_checksum`: the sha256 of its configuration and stored tensors,
the same for a memory in RAM and its save) and the sha256 of ``gate.safetensors``; :func:`load_gate`
refuses, in one line, a gate saved with another memory, a damaged weights file, or non-finite weights.

The weights file is written first and ``gate.json`` last (each to a temporary name, then renamed), so a
folder with a readable ``gate.json`` always has the weights it describes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mlpmem.errors import ConfigError, CorruptArtifact, FingerprintMismatch
from mlpmem.inference.gate import FEATURE_VERSION, FEATURES, Gate, GateConfig
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import state_to_save
from mlpmem.utils.checksums import check_finite
from mlpmem.utils.shards import read_json, sha256_file, temporary, write_json, writing

FORMAT = "mlpmem.gate/1"
GATE_CONFIG = "gate.json"
GATE_WEIGHTS = "gate.safetensors"


def memory_checksum(memory: MLPMemory) -> str:
    """sha256 of the memory's configuration and stored tensors (names, dtypes, shapes, bytes; a tied head is the
    backbone's and is covered by the configuration's backbone fingerprint)."""
    h = hashlib.sha256(json.dumps(memory.config.to_dict(), sort_keys=True).encode())
    for name, tensor in sorted(state_to_save(memory).items()):
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        h.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_gate(gate: Gate, directory: str | os.PathLike, memory: MLPMemory, extra: dict | None = None) -> Path:
    """Write ``gate`` to ``directory`` (created if needed) bound to ``memory``; ``extra`` goes into gate.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / GATE_WEIGHTS
    tmp = temporary(weights)
    state = {k: v.detach().to("cpu").contiguous() for k, v in gate.state_dict().items()}
    with writing(tmp):
        save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, weights)
    write_json(directory / GATE_CONFIG, {
        "format": FORMAT,
        "config": gate.config.to_dict(),
        "key_size": gate.key_size,
        "features": list(FEATURES),
        "feature_version": FEATURE_VERSION,
        "memory_sha256": memory_checksum(memory),
        "weights_sha256": sha256_file(weights),
        **(extra or {}),
    })
    return directory


def read_gate_record(directory: str | os.PathLike) -> dict:
    """``gate.json`` of a saved gate, checked for its format."""
    path = Path(directory) / GATE_CONFIG
    record = read_json(path, "gate")
    if (record.get("format"), record.get("features"), record.get("feature_version")) != (
            FORMAT, list(FEATURES), FEATURE_VERSION):
        raise CorruptArtifact(f"{path} is not a gate of this version of mlpmem (format {record.get('format')!r})")
    return record


def saved_for(directory: str | os.PathLike, memory: MLPMemory) -> bool:
    """Whether ``directory`` holds a gate saved with ``memory`` (what :func:`load_gate` would accept of it)."""
    path = Path(directory) / GATE_CONFIG
    return path.is_file() and read_gate_record(directory)["memory_sha256"] == memory_checksum(memory)


def load_gate(directory: str | os.PathLike, memory: MLPMemory) -> Gate:
    """The gate saved in ``directory``; refused unless it was saved with ``memory`` (same checksum)."""
    directory = Path(directory)
    record = read_gate_record(directory)
    if record["memory_sha256"] != memory_checksum(memory):
        raise FingerprintMismatch(f"the gate in {directory} was trained with another memory (checksum "
                                  f"{record['memory_sha256'][:12]}, this memory's is {memory_checksum(memory)[:12]}): "
                                  "retrain it with `mlpmem gate CONFIG`")
    weights = directory / GATE_WEIGHTS
    if not weights.is_file():
        raise CorruptArtifact(f"{weights} is missing")
    if sha256_file(weights) != record["weights_sha256"]:
        raise CorruptArtifact(f"{weights} fails its checksum (truncated or corrupted): retrain the gate")
    try:
        gate = Gate(GateConfig.from_dict(record["config"]), record["key_size"])
    except ConfigError as exc:
        raise CorruptArtifact(f"{directory / GATE_CONFIG}: {exc}") from None
    with safe_open(str(weights), framework="pt") as handle:
        state = {name: handle.get_tensor(name) for name in handle.keys()}
    check_finite(state, str(weights))
    try:
        gate.load_state_dict(state)
    except RuntimeError as exc:
        raise CorruptArtifact(f"{weights}: does not match its gate.json ({str(exc).splitlines()[0]})") from None
    return gate.eval()
