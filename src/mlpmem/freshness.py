"""Whether an artifact is current: the one freshness check of every artifact mlpmem builds.

Every artifact records what it was built from as one flat JSON object of *settings*: dotted keys to JSON
values (``train.lr``, ``datastore.pack``, ``layer``), the checksums of the inputs it read among them
(``memory.sha256``). A run folder's stage record (:mod:`mlpmem.pipeline.records`) and a trainer state
(:class:`mlpmem.training.checkpoint.TrainState`) hold them as ``built_from``; a sharded build's manifest (keystore,
teacher) as its top-level keys beside its progress (:func:`mlpmem.utils.shards.check_manifest`); the kNN-LM
neighbour lists, a cache searched again when stale, as ``inputs``. :func:`staleness` compares the recorded
settings with those wanted now, over every key of either: a changed value, or a key the artifact does not record,
makes it stale, and :func:`check` refuses it with one line that names the first difference and says how to bring
it up to date.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mlpmem.errors import StaleArtifact

MISSING = "(not recorded)"
"""How a setting an artifact does not record reads in a difference."""


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{"a.b": leaf}`` (lists are leaves)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def settings(value: Mapping) -> dict[str, Any]:
    """``value`` (nested sections) as recorded settings: dotted keys, values as they read back from JSON."""
    return json.loads(json.dumps(flatten(dict(value)), default=str))


def differences(recorded: Mapping, wanted: Mapping) -> list[tuple[str, Any, Any]]:
    """``(key, recorded, wanted)`` for every key of either whose values differ (:data:`MISSING` for an absent
    one), the wanted keys first, in their order."""
    keys = [*wanted, *(k for k in recorded if k not in wanted)]
    return [(k, recorded.get(k, MISSING), wanted.get(k, MISSING)) for k in keys
            if k not in recorded or k not in wanted or recorded[k] != wanted[k]]


def staleness(recorded: Mapping, wanted: Mapping, built: str = "was built") -> str | None:
    """Why an artifact that recorded ``recorded`` is not current for ``wanted`` (``"was built with k=a, but the
    configuration now gives k=b"``), or None when it is current."""
    diff = differences(recorded, wanted)
    if not diff:
        return None
    key, old, new = diff[0]
    more = f" (and {len(diff) - 1} more setting{'s' * (len(diff) > 2)})" if len(diff) > 1 else ""
    if old == MISSING:
        return f"records no {key}{more}"
    return f"{built} with {key}={old!r}, but the configuration now gives {key}={new!r}{more}"


def is_current(recorded: Mapping | None, wanted: Mapping) -> bool:
    """Whether an artifact's ``recorded`` settings (None: it has no record) are exactly ``wanted``."""
    return recorded is not None and not differences(recorded, wanted)


def check(recorded: Mapping, wanted: Mapping, what: str, hint: str = "rebuild it (--rebuild)", *,
          built: str = "was built", error: type[Exception] = StaleArtifact) -> None:
    """Raise a one-line ``error`` (``"<what> <why>: <hint>"``) unless ``recorded`` is exactly ``wanted``."""
    why = staleness(recorded, wanted, built)
    if why is not None:
        raise error(f"{what} {why}: {hint}")
