"""Checksums of a folder's files in a sidecar beside it, and the finiteness of weights.

A saved memory (``config.json`` + ``model.safetensors``) is replaced whole on every save and holds only its
own files, so the sha256 of its files live beside it, in ``<folder>.sha256.json`` (``memory/`` ->
``memory.sha256.json``). :func:`record_folder` writes the sidecar after a stage has produced the folder;
:func:`verify_folder` checks it when the folder is opened, and :func:`verify_weights` adds the check every
reader of weights needs: no NaN or Inf, which a checksum cannot see in a memory trained into NaN.

A sidecar that does not match is a one-line :class:`~mlpmem.errors.CorruptArtifact`. A memory of a run folder
or of a saved model is refused without its sidecar (:func:`require_record`): deleting the file never turns the
check off; ``mlpmem record-checksums FOLDER`` records it again, deliberately. A memory folder saved alone by a
library caller has none and is read unchecked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from mlpmem.errors import CorruptArtifact
from mlpmem.utils.shards import read_json, sha256_file, write_json

FORMAT = "mlpmem.checksums/1"


def sidecar(folder: str | Path) -> Path:
    """Where the checksums of ``folder``'s files are recorded: ``<folder>.sha256.json`` beside it."""
    folder = Path(folder)
    return folder.with_name(f"{folder.name}.sha256.json")


def record_folder(folder: str | Path, names: Iterable[str]) -> dict[str, str]:
    """Record the sha256 of ``folder/<name>`` for every name in the sidecar; return ``{name: sha256}``."""
    folder = Path(folder)
    files = {}
    for name in names:
        if not (folder / name).is_file():
            raise CorruptArtifact(f"{folder / name} is missing")
        files[name] = sha256_file(folder / name)
    write_json(sidecar(folder), {"format": FORMAT, "files": files})
    return files


def recorded(folder: str | Path) -> dict[str, str] | None:
    """The ``{name: sha256}`` recorded for ``folder``, or None when it has no sidecar."""
    path = sidecar(folder)
    if not path.is_file():
        return None
    record = read_json(path, "checksums")
    if record.get("format") != FORMAT or not isinstance(record.get("files"), dict):
        raise CorruptArtifact(f"{path} is not a checksums file")
    return record["files"]


def verify_folder(folder: str | Path, what: str | None = None) -> dict[str, str] | None:
    """Check every file recorded for ``folder`` against its sha256; return the record (None: nothing recorded)."""
    folder = Path(folder)
    files = recorded(folder)
    for name, digest in (files or {}).items():
        path = folder / name
        if not path.is_file():
            raise CorruptArtifact(f"{what or folder}: {path} is missing")
        if sha256_file(path) != digest:
            raise CorruptArtifact(f"{what or folder}: {path} fails its checksum (truncated or corrupted): "
                                  "retrain it (`mlpmem train CONFIG --rebuild`)")
    return files


def require_record(folder: str | Path, what: str, remedy: str) -> dict[str, str]:
    """:func:`verify_folder`, refusing a folder that has no sidecar (``remedy``: how to record it again)."""
    files = verify_folder(folder, what)
    if files is None:
        raise CorruptArtifact(f"{what} has no checksum record ({sidecar(folder)} is missing), so its files cannot "
                              f"be verified: {remedy}")
    return files


def check_finite(tensors: Mapping[str, torch.Tensor], what: str) -> None:
    """Refuse weights holding NaN or Inf (a diverged training, a damaged file), naming the first such tensor."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CorruptArtifact(f"{what}: tensor {name} holds NaN/Inf values: retrain the memory "
                                  "(`mlpmem train CONFIG --rebuild`, e.g. with a lower train.lr)")


def verify_weights(path: str | Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """The checks of a weights file just read (``tensors``, from ``path``): the sidecar of its folder, if any,
    and finite values. One call for every reader of a saved memory."""
    path = Path(path)
    verify_folder(path.parent, f"memory {path.parent}")
    check_finite(tensors, str(path))
