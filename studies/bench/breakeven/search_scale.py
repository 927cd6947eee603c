"""kNN-LM's search beyond the measured corpora: the largest size's run with its datastore topped up to each of
``search_keys`` keys by resampled synthetic keys (:func:`studies.bench.knn_setup.resampled_keys`), searched with
IVF-PQ (lists sized to the keys, as the released code's 4096 from 4096·39 keys on), decode timed at batch 1 beside the
backbone and the memory by ``bench infer``. Only the search's cost is measured: the extra keys are real keys moved by
noise, so what their neighbours predict is no kNN-LM's. Each count's keys, index and timing live in
``out_dir/search-<N>`` and are reused while their settings hold."""

from __future__ import annotations

from pathlib import Path

from mlpmem.baselines.knnlm import CombinedKeyStore
from mlpmem.errors import ConfigError
from mlpmem.index import IndexConfig
from studies.bench.breakeven.config import BreakEvenConfig
from studies.bench.breakeven.costs import online_costs, search_per_token
from studies.bench.breakeven.online import index_record, infer_results
from studies.bench.breakeven.stages import SizeRun
from studies.bench.infer.config import InferBenchConfig
from studies.bench.infer.setup import own_keystores
from studies.bench.knn_setup import KnnSetupConfig, existing_sources

TRAIN_SIZE = 4096 * 39
"""Keys the coarse quantizer is trained on: FAISS's 39 per list at the largest list count."""


def search_config(cfg: BreakEvenConfig, keys: int) -> InferBenchConfig:
    """``bench infer``'s options for ``keys`` keys: backbone, memory and IVF-PQ kNN-LM at batch 1."""
    folder = Path(cfg.out_dir) / f"search-{keys}"
    index = IndexConfig(kind="ivf_pq", nlist=0, nprobe=cfg.nprobe, pq_bytes=cfg.pq_bytes, train_size=TRAIN_SIZE)
    knn = KnnSetupConfig(sources=[], min_keys=keys, extra_dir=str(folder / "keys"), top_up="resampled",
                         index_dir=str(folder / "knn-index"), index=index)
    return InferBenchConfig(prompt_tokens=cfg.prompt_tokens, new_tokens=cfg.new_tokens, batch_sizes=[1],
                            repeats=cfg.repeats, warmup=cfg.warmup, methods=["backbone", "memory", "knnlm"],
                            ladder=False, threads=cfg.threads, out_dir=str(folder / "infer"), knn=knn,
                            knn_keys="bench")


def search_entry(cfg: BreakEvenConfig, size: SizeRun, keys: int, real_keys: int, progress: bool) -> dict:
    """Decode of backbone, memory and kNN-LM over ``keys`` keys, ``real_keys`` of them the run's; the index's lists,
    build time and bytes."""
    icfg = search_config(cfg, keys)
    results = infer_results(size, icfg, progress)
    decode = {m: by_batch["1"]["decode_tok_s"] for m, by_batch in online_costs(results).items()}
    index = index_record(Path(icfg.knn.index_dir))
    return {"keys": results["info"]["knnlm"]["keys"], "real_keys": real_keys,
            "run_tokens": size.record["offline"]["keys_train"]["rows"], "decode_tok_s": decode,
            "memory_over_knnlm": decode["memory"] / decode["knnlm"],
            "search_s_per_token": search_per_token(results, cfg.new_tokens)["knnlm"],
            "index": {k: index[k] for k in ("nlist", "nprobe", "build_seconds", "bytes")}}


def search_scale(cfg: BreakEvenConfig, largest: SizeRun, progress: bool) -> list[dict]:
    """One entry per ``cfg.search_keys`` count (smallest first), each on the largest size's run; a count the run's
    own keys already reach is refused before anything is measured."""
    if not cfg.search_keys:
        return []
    real = CombinedKeyStore(existing_sources(own_keystores(largest.run.dir), [])).num_rows
    if min(cfg.search_keys) <= real:
        raise ConfigError(f"search_keys must exceed the {real:,} keys the largest size's run already holds, got "
                          f"{min(cfg.search_keys):,}")
    return [search_entry(cfg, largest, keys, real, progress) for keys in sorted(cfg.search_keys)]
