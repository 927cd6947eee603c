"""How each measured cost grows with the corpus: a straight line and a power law fitted over the sizes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from studies.bench.breakeven.arithmetic import fit_linear, fit_power_law


def _get(*path: str) -> Callable[[dict], float | None]:
    def read(entry: dict) -> float | None:
        value = entry
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value
    return read


COSTS: dict[str, tuple[str, Callable[[dict], float | None]]] = {
    "key extraction": ("s", _get("offline_seconds", "memory_parts", "keys")),
    "teacher": ("s", _get("offline_seconds", "memory_parts", "teacher")),
    "memory training": ("s", _get("offline_seconds", "memory_parts", "train")),
    "memory offline": ("s", _get("offline_seconds", "memory")),
    "kNN-LM IVF-PQ index build": ("s", _get("offline_seconds", "knnlm_index")),
    "RAG passage encoding + index": ("s", _get("offline_seconds", "rag")),
    "CPT training": ("s", _get("offline_seconds", "cpt")),
    "LoRA training": ("s", _get("offline_seconds", "lora")),
    "kNN-LM search per token, exact": ("s", _get("search_s_per_token", "knnlm-exact")),
    "kNN-LM search per token, IVF-PQ": ("s", _get("search_s_per_token", "knnlm")),
    "backbone decode per token": ("s", _get("online", "backbone", "1", "decode_s")),
    "memory decode per token": ("s", _get("online", "memory", "1", "decode_s")),
    "kNN-LM decode per token, exact": ("s", _get("online", "knnlm-exact", "1", "decode_s")),
    "RAG TTFT": ("s", _get("online", "rag", "1", "ttft_s")),
    "memory TTFT": ("s", _get("online", "memory", "1", "ttft_s")),
    "memory weights": ("bytes", _get("storage_bytes", "memory")),
    "datastore (keys + values)": ("bytes", _get("storage_bytes", "knnlm-exact")),
    "RAG passages (embeddings + text)": ("bytes", _get("storage_bytes", "rag")),
}
"""Each cost: its unit and where a size's entry holds it."""


def growth_laws(entries: list[dict]) -> dict:
    """Per cost: the measured points (corpus tokens, cost), the straight line and, with positive costs, the power
    law; a cost measured at fewer than two sizes gets its points only."""
    out = {}
    for name, (unit, read) in COSTS.items():
        points = [(e["tokens"], read(e)) for e in entries if read(e) is not None]
        law: dict = {"unit": unit, "points": points}
        if len({t for t, _ in points}) >= 2:
            sizes, costs = [t for t, _ in points], [c for _, c in points]
            law["linear"] = asdict(fit_linear(sizes, costs))
            if min(costs) > 0:
                law["power"] = asdict(fit_power_law(sizes, costs))
        out[name] = law
    return out
