"""A projection to the paper's regime (a 7B backbone, 10^8 to 5·10^9 corpus tokens): FLOP counts of the paper's
settings turned into seconds at the FLOP rates this machine reached on the same work at the largest measured size,
and the measured online ratios. A projection with its assumptions, never a measurement.

Assumptions, all in :class:`PaperRegime` and printed with the result: every cost is FLOPs ÷ the rate this machine
reached on the same stage (so the machine stays this one, only the sizes change); decode and TTFT scale with the
backbone's parameters (weight-bound) and keep their measured ratios to the backbone; a kNN-LM search costs what an
IVF-PQ search with the paper's lists, probes and codes costs in FLOPs (:func:`.flops.search`), at the search rate
measured over the most keys searched (:mod:`.search_scale` when run); keys are read once per token (no window
overlap).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from studies.bench.breakeven import flops
from studies.bench.breakeven.arithmetic import MethodCost, RequestShape, break_even


@dataclass(frozen=True)
class PaperRegime:
    backbone_parameters: float = 7.0e9
    key_dim: int = 4096
    memory_parameters: float = 1.0e9
    """Assumed: the paper does not itemize its 7B memory's size here; about 1/7 of the backbone."""
    memory_epochs: float = 5.0
    """The paper's training (App. A, Table 4)."""
    corpus_tokens: tuple[float, ...] = (1.0e8, 1.0e9, 5.0e9)
    nlist: int = 4096
    nprobe: int = 32
    pq_bytes: int = 64
    """The released code's IVF-PQ index: 4096 lists, 64-byte codes, 32 probes."""
    key_bytes: int = 2
    value_bytes: int = 4
    """fp16 keys and int32 next tokens: 5·10^9 × (2 × 4096 + 4) bytes is the released code's 40 TB."""
    encoder_parameters: float = 22.7e6
    """all-MiniLM-L6-v2, RAG's encoder here."""
    embedding_dim: int = 384
    tokens_per_passage: float = 160.0
    text_bytes_per_token: float = 4.0


def _rate(flop: float | None, seconds: float) -> float | None:
    return None if not flop or seconds <= 0 else flop / seconds


def measured_rates(largest: dict, searched: dict | None = None) -> dict:
    """FLOP/s this machine reached at the largest size: per offline stage, RAG's encoding, kNN-LM's search per
    query (IVF-PQ if timed, else exact; over the most keys searched, ``searched``, an entry of
    :mod:`.search_scale`, when given), and the backbone's decode step and prefill (2 FLOPs per parameter and
    token)."""
    parts, fl = largest["offline_seconds"]["memory_parts"], largest["offline_flops_estimate"]["memory_parts"]
    rates = {k: _rate(fl[k], parts[k]) for k in ("keys", "teacher", "train")}
    rates["rag"] = _rate(largest["offline_flops_estimate"]["rag"], largest["offline_seconds"]["rag"])
    rates["index"] = _rate(largest["offline_flops_estimate"].get("knnlm_index"),
                           largest["offline_seconds"].get("knnlm_index", 0.0)) or rates["teacher"]
    rates["search"], rates["search_kind"], rates["search_keys"] = _search_rate(largest, searched)
    backbone = largest["online"]["backbone"]["1"]
    rates["decode"] = 2.0 * largest["backbone_parameters"] / backbone["decode_s"]
    rates["prefill"] = 2.0 * largest["backbone_parameters"] * largest["prompt_tokens"] / backbone["ttft_s"]
    return rates


def _search_rate(largest: dict, searched: dict | None) -> tuple[float | None, str, int]:
    """FLOP/s of one kNN-LM search, its kind and the keys searched: over ``searched``'s keys when given (IVF-PQ),
    else the largest size's own datastore (IVF-PQ if timed there, else exact)."""
    d, pq_bytes = largest["key_dim"], largest["pq_bytes"]
    if searched is not None:
        n, index, seconds, kind = searched["keys"], searched["index"], searched["search_s_per_token"], "knnlm"
    else:
        search = largest["search_s_per_token"]
        kind = "knnlm" if "knnlm" in search else "knnlm-exact"
        n, index, seconds = largest["tokens"], largest.get("ivfpq") or {}, search[kind]
    per_query = (flops.search("ivf_pq", d, n, 1, index["nlist"], index["nprobe"], pq_bytes) if kind == "knnlm"
                 else flops.search("exact", d, n, 1))
    return _rate(per_query, seconds), kind, n


def _ratios(largest: dict) -> dict:
    """The measured online ratios at batch 1 to the backbone's decode step and TTFT."""
    on = largest["online"]
    bb_decode, bb_ttft = on["backbone"]["1"]["decode_s"], on["backbone"]["1"]["ttft_s"]
    return {"memory_decode": on["memory"]["1"]["decode_s"] / bb_decode,
            "memory_ttft": on["memory"]["1"]["ttft_s"] / bb_ttft, "rag_decode": on["rag"]["1"]["decode_s"] / bb_decode,
            "rag_ttft_extra": (on["rag"]["1"]["ttft_s"] - bb_ttft) / bb_ttft}


def _one_size(tokens: float, regime: PaperRegime, rates: dict, ratios: dict, shape: RequestShape) -> dict:
    p, d = regime.backbone_parameters, regime.key_dim
    keys = 2.0 * p * tokens
    ivf = flops.ivf_build("ivf_pq", d, int(tokens), regime.nlist, min(int(tokens), 100_000))
    teacher = flops.search("ivf_pq", d, int(tokens), int(tokens), regime.nlist, regime.nprobe, regime.pq_bytes) + ivf
    train = 6.0 * regime.memory_parameters * tokens * regime.memory_epochs
    rag = 2.0 * regime.encoder_parameters * tokens
    fl = {"memory": keys + teacher + train, "knnlm": keys + ivf, "rag": rag}
    seconds = {"memory": keys / rates["keys"] + teacher / rates["teacher"] + train / rates["train"],
               "knnlm": keys / rates["keys"] + ivf / rates["index"], "rag": rag / rates["rag"]}
    bb_step = 2.0 * p / rates["decode"]
    search = flops.search("ivf_pq", d, int(tokens), 1, regime.nlist, regime.nprobe, regime.pq_bytes) / rates["search"]
    bb_ttft = 2.0 * p * shape.prompt_tokens / rates["prefill"]
    online = {"memory": (bb_ttft * ratios["memory_ttft"], bb_step * (1 + regime.memory_parameters / p)),
              "knnlm": (bb_ttft + search, bb_step + search),
              "rag": (bb_ttft * (1 + ratios["rag_ttft_extra"]), bb_step * ratios["rag_decode"])}
    costs = {m: MethodCost(m, seconds[m], *online[m]) for m in fl}
    storage = {"memory": regime.memory_parameters * 2, "knnlm": tokens * (d * regime.key_bytes + regime.value_bytes),
               "knnlm_pq_codes": tokens * regime.pq_bytes,
               "rag": tokens * (regime.text_bytes_per_token + regime.embedding_dim * 4 / regime.tokens_per_passage)}
    return {"tokens": tokens, "flops": fl, "seconds_this_machine": seconds, "storage_bytes": storage,
            "decode_memory_over_knnlm": (bb_step + search) / online["memory"][1],
            "breakeven": {o: asdict(break_even(costs["memory"], costs[o], shape)) for o in ("rag", "knnlm")}}


def six_x_size(regime: PaperRegime, rates: dict, target: float = 6.0) -> float | None:
    """Corpus tokens where the projected kNN-LM decode is ``target`` times slower than the memory's (None: never
    within a linear IVF-PQ scan, i.e. the fixed part of a search already costs more)."""
    p, d = regime.backbone_parameters, regime.key_dim
    bb_step = 2.0 * p / rates["decode"]
    needed = (target * bb_step * (1 + regime.memory_parameters / p) - bb_step) * rates["search"]  # FLOPs per search
    fixed = flops.search("ivf_pq", d, 0, 1, regime.nlist, regime.nprobe, regime.pq_bytes)
    per_key = regime.pq_bytes * min(regime.nprobe, regime.nlist) / regime.nlist
    return None if needed <= fixed else (needed - fixed) / per_key


def project(largest: dict, shape: RequestShape, searched: dict | None = None,
            regime: PaperRegime | None = None) -> dict:
    """The projection from the largest measured size and, for the search rate, the most keys searched (see the
    module's assumptions)."""
    regime = regime or PaperRegime()
    rates = measured_rates(largest, searched)
    if None in (rates["keys"], rates["teacher"], rates["train"], rates["rag"], rates["search"]):
        return {"note": "no projection: a stage without a FLOP estimate or a measured time (e.g. BM25's RAG)"}
    ratios = _ratios(largest)
    return {"assumptions": asdict(regime), "rates_flop_s": rates, "measured_ratios": ratios,
            "from_tokens": largest["tokens"],
            "sizes": [_one_size(t, regime, rates, ratios, shape) for t in regime.corpus_tokens],
            "decode_6x_tokens": six_x_size(regime, rates)}
