"""One size's entry of ``results.json``: offline seconds and estimated FLOPs per method, online TTFT and decode per
method and batch, storage, and the memory's break-even requests against RAG and kNN-LM."""

from __future__ import annotations

from dataclasses import asdict

from mlpmem.datastore import KeyStore
from mlpmem.utils.shards import read_json
from studies.bench.breakeven import flops
from studies.bench.breakeven.arithmetic import MethodCost, RequestShape, break_even
from studies.bench.breakeven.stages import SizeRun

AGAINST = ("rag", "knnlm-exact", "knnlm")
"""What the memory's total cost is compared with."""


def shape_of(prompt_tokens: int, new_tokens: int) -> RequestShape:
    """A request as ``bench infer`` times it: TTFT gives the first token, decode the ``new_tokens - 1`` after it."""
    return RequestShape(prompt_tokens, new_tokens - 1)


def offline_seconds(offline: dict, finetune: dict, online: dict, index: dict | None) -> dict:
    """Seconds each method costs before its first request (the parts of the memory's too)."""
    keys, teacher, train = (offline[k]["seconds"] for k in ("keys_train", "teacher", "train"))
    out = {"backbone": 0.0, "memory": keys + teacher + train, "knnlm-exact": keys,
           "rag": online["info"]["rag"]["index_seconds"],
           "memory_parts": {"keys": keys, "teacher": teacher, "train": train}}
    if index is not None:
        out["knnlm"] = keys + index["build_seconds"]
        out["knnlm_index"] = index["build_seconds"]
    out.update({name: values["seconds"] for name, values in finetune.items()})
    return out


def offline_flops(size: SizeRun, counts: flops.BackboneCounts, finetune: dict, online: dict,
                  index: dict | None) -> dict:
    """Estimated FLOPs of the same (:mod:`.flops`: parameter counts × tokens)."""
    run, store, offline = size.run, KeyStore(size.run.layout.datastore, verify=False), size.record["offline"]
    n, d, corpus = store.num_rows, store.hidden_size, run.cfg.corpus
    keys = flops.key_extraction(counts, int(store.manifest["layer"]), n, corpus.block_size, corpus.stride)
    tcfg = run.cfg.teacher.index
    kind, nlist = tcfg.resolved_kind(n), min(tcfg.resolved_nlist(n), max(1, n // 39))
    teacher = (flops.search(kind, d, n, n, nlist, tcfg.nprobe, tcfg.pq_bytes)
               + flops.ivf_build(kind, d, n, nlist, min(n, max(tcfg.train_size, 256 * 39))))
    results = read_json(run.layout.results, "run results")
    trainable = results["memory_trainable_parameters"]
    train = flops.memory_training(trainable, results["memory_parameters"] - trainable, offline["train"]["tokens"])
    out = {"backbone": 0.0, "memory": keys + teacher + train, "knnlm-exact": keys,
           "rag": flops.encoding(online["info"]["rag"].get("encoder_parameters"), n),
           "memory_parts": {"keys": keys, "teacher": teacher, "train": train}}
    if index is not None:
        out["knnlm_index"] = flops.ivf_build("ivf_pq", d, n, index["nlist"], min(n, 100_000))
        out["knnlm"] = keys + out["knnlm_index"]
    for name, values in finetune.items():
        out[name] = flops.finetune(counts.parameters, values["trainable_parameters"], values["tokens"], name == "cpt")
    return out


def online_costs(online: dict) -> dict:
    """Per method and batch size: TTFT and decode medians, and a request's share of them (seconds per request
    for TTFT, per generated token for decode; a batch of B shares its TTFT and decode steps among B requests)."""
    out = {}
    for name, by_batch in online["methods"].items():
        for batch, entry in by_batch.items():
            ttft, tok_s = entry["ttft_s"]["median"], entry["decode_tok_s"]["median"]
            out.setdefault(name, {})[batch] = {"ttft_s": ttft, "decode_tok_s": tok_s,
                                               "ttft_per_request_s": ttft / int(batch), "decode_s": 1.0 / tok_s}
    return out


def search_per_token(online: dict, new_tokens: int) -> dict:
    """kNN-LM's search seconds per generated token at batch 1 (one search per kept position and step)."""
    return {name: online["methods"][name]["1"]["search_s"]["median"] / new_tokens
            for name in ("knnlm-exact", "knnlm") if name in online["methods"]}


def method_costs(offline: dict, online: dict, batch: str) -> dict[str, MethodCost]:
    """Every method with both an offline cost and a timing at ``batch``."""
    return {name: MethodCost(name, offline[name], by_batch[batch]["ttft_per_request_s"], by_batch[batch]["decode_s"])
            for name, by_batch in online.items() if batch in by_batch and name in offline}


def break_evens(offline: dict, online: dict, shape: RequestShape) -> dict:
    """Per batch size: the memory against each of ``AGAINST`` timed at that batch (verdict and requests)."""
    out = {}
    for batch in sorted({b for by_batch in online.values() for b in by_batch}, key=int):
        costs = method_costs(offline, online, batch)
        if "memory" in costs:
            out[batch] = {o: asdict(break_even(costs["memory"], costs[o], shape)) for o in AGAINST if o in costs}
    return out


def size_entry(size: SizeRun, shape: RequestShape, new_tokens: int, online: dict, storage: dict,
               index: dict | None, pq_bytes: int) -> dict:
    """Everything measured at one size, and its break-even requests."""
    offline, finetune = size.record["offline"], size.record["finetune"]
    seconds = offline_seconds(offline, finetune, online, index)
    timed = online_costs(online)
    counts = flops.backbone_counts(size.run.backbone[0])
    return {"tokens": offline["keys_train"]["rows"], "cap": size.tokens, "run_dir": str(size.run.dir),
            "key_dim": KeyStore(size.run.layout.datastore, verify=False).hidden_size, "pq_bytes": pq_bytes,
            "backbone_parameters": counts.parameters, "prompt_tokens": shape.prompt_tokens,
            "offline_seconds": seconds, "offline_flops_estimate": offline_flops(size, counts, finetune, online, index),
            "stages": offline, "finetune": finetune, "online": timed,
            "search_s_per_token": search_per_token(online, new_tokens), "storage_bytes": storage,
            "ivfpq": None if index is None else {k: index[k] for k in ("nlist", "ntotal", "nprobe", "build_seconds")},
            "ivfpq_note": online.get("ivfpq_note"), "memory_lambda": online["info"]["memory"]["lambda"],
            "breakeven": break_evens(seconds, timed, shape)}
