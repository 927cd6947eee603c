"""``python -m studies bench offline``: speed of the offline stages on a capped slice of a run's corpus, in one process.

Measured side by side (``repeats`` interleaved repetitions after a warm-up, median [min-max]):

1. **Key extraction vs plain forward** on the same windows: the backbone's full forward (fp32, and at the
   run's precision) against the key pass of the datastore stage (:func:`~mlpmem.datastore.encode_windows`,
   which stops after the key layer), in input tokens/s.
2. **Stages of the pipeline itself** on the capped corpus, in a bench run folder (``out_dir``):
   ``stage_datastore`` (keys of the training split: scored tokens/s, I/O included), ``stage_teacher``
   (kNN search + sparse top-K targets) and memory training (:func:`~mlpmem.training.loop.train_memory` for
   ``train_steps`` steps at the run's batch size and precision). Ratio teacher / key-extraction seconds.
3. **Matmul peak**: a plain square ``torch.mm`` (up to ``peak_size``², smaller where one product already takes
   20 ms, e.g. bf16 emulated on an AVX2 CPU) in fp32 and bf16 on the same threads;
   training reaches ``FLOPs/token × tokens/s`` where FLOPs/token of one training step (forward + backward)
   are counted by ``torch.utils.flop_counter.FlopCounterMode``; fraction of the peak of its precision.
4. **Teacher bytes per token**: from its manifest (6·K + 4) and the bytes on disk.
5. **Teacher search at full size**: the slice hides that exact search grows with N² (N queries × N keys).
   Over the full run's own datastore, ``teacher_queries`` seeded queries are searched (k + 1 neighbours,
   then the sparse targets) with the exact fp32 scan and with the bf16 scan re-ranked in fp32
   (:class:`~mlpmem.index.ExactIndex`), interleaved; seconds per query × N gives each teacher's time at full
   size, divided by the key extraction time at full size (N / the slice's key-extraction tokens/s). The
   agreement of the two teachers: neighbour recall and the total-variation distance of the target rows. With an
   IVF-flat run, its index at its nprobe and a quarter of it, and at its nprobe searched query by query (FAISS's
   own search) beside the list-by-list batches the teacher uses for large batches (:mod:`mlpmem.index`); the
   queries are searched in batches of the run's ``teacher.query_batch``.

The recorded stage timings of the full run (``<run_dir>/timings.json``, read-only) are shown next to them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mlpmem.compute import compute_device, inference_scope, model_device, resolve_precision, synchronize
from mlpmem.config import Config
from mlpmem.corpora.documents import document_lengths, make_windows
from mlpmem.datastore import KeyStore, encode_windows, pad_windows
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.index import ExactIndex, FaissIndex
from mlpmem.memory.vocab import index_of
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.datastore import stage_datastore
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.teacher import stage_teacher
from mlpmem.pipeline.train import build_memory, eval_data, head_vocabulary
from mlpmem.reporting.tables import markdown_table
from mlpmem.teacher import TeacherStore, knn_sparse
from mlpmem.training.data import TrainData
from mlpmem.training.loop import train_memory
from studies.bench.common import summarize, threads, write_text
from studies.bench.flops import peak_max_size, peak_size, random_square, synced_mm, train_flops_per_token


@dataclass
class OfflineBenchConfig(Config):
    overrides: list[str] = field(default_factory=list)
    """``KEY=VALUE`` overrides of the measured run's config (``--set``), e.g. another memory recipe."""
    train_tokens: int = 24_000
    """Cap of the training split (keys, teacher and training run on it)."""
    eval_tokens: int = 2_048
    """Cap of the validation/test splits (the datastore stage encodes them too)."""
    forward_windows: int = 4
    """Windows of the training split timed for plain forward vs key pass (batches of the datastore's size)."""
    train_steps: int = 30
    repeats: int = 3
    warmup: int = 1
    peak_size: int = 2048
    teacher_queries: int = 2048
    """Queries of the full-size teacher search comparison (0 skips it)."""
    threads: int | None = None
    out_dir: str = "runs/bench/offline"

    def validate(self) -> None:
        if min(self.train_tokens, self.eval_tokens) < 2 or self.forward_windows < 1 or self.train_steps < 2:
            raise ConfigError("bench offline needs train/eval_tokens >= 2, forward_windows >= 1, train_steps >= 2")
        if self.repeats < 1 or self.warmup < 0 or self.peak_size < 64:
            raise ConfigError("bench offline repeats >= 1, warmup >= 0 and peak_size >= 64 needed")


# ---------------------------------------------------------------------------------------------
# 1. Key pass vs plain forward


@torch.no_grad()
def forward_vs_keys(run, cfg: OfflineBenchConfig) -> dict:
    """Input tokens/s of the plain forward (fp32 and run precision) and of the datastore's key pass."""
    model, _ = run.backbone
    rc = run.cfg
    docs = split_tokens(run, "train")
    windows = make_windows(document_lengths(docs), rc.corpus.block_size, rc.corpus.stride)[: cfg.forward_windows]
    size = rc.datastore.batch_size
    batches = [windows[i : i + size] for i in range(0, len(windows), size)]
    tokens = sum(w.end - w.start for w in windows)
    precision = resolve_precision(rc.backbone.precision, model_device(model))

    def plain(prec):
        def go():
            with inference_scope(model, prec):  # as the datastore stage runs: each weight cast once per pass
                for batch in batches:
                    ids, mask = pad_windows(docs, batch, device=model_device(model))
                    model(input_ids=ids, attention_mask=mask, use_cache=False)
            synchronize(model)
        return go

    def keys():
        with inference_scope(model, precision):
            for batch in batches:
                encode_windows(model, docs, batch, rc.backbone.layer, rc.backbone.site, False, precision)

    variants = {"plain forward fp32": plain("fp32"), f"plain forward {precision}": plain(precision),
                f"key pass {precision} (layer {rc.backbone.layer}, {rc.backbone.site})": keys}
    return {"input_tokens": tokens, "windows": len(windows), "tokens_per_s": _interleave(variants, cfg, tokens)}


def _interleave(fns: dict, cfg: OfflineBenchConfig, work: float) -> dict:
    """Run each function ``warmup + repeats`` times in rotating order; ``work / seconds`` per function."""
    names = list(fns)
    samples = {n: [] for n in names}
    for rep in range(cfg.warmup + cfg.repeats):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            if rep >= cfg.warmup:
                samples[name].append(work / (time.perf_counter() - t0))
    return {n: summarize(v) for n, v in samples.items()}


# ---------------------------------------------------------------------------------------------
# 2.-3. Pipeline stages, FLOPs and peak


def matmul_peak(max_size: int, cfg: OfflineBenchConfig, device: torch.device | str = "cpu") -> dict:
    """FLOP/s of a plain square matmul in fp32 and bf16 on ``device`` (where the memory trains), each at the size
    :func:`peak_size` picks (at most ``max_size``, 8192 on a GPU; recorded as ``size``)."""
    out, max_size = {}, peak_max_size(device, max_size)
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        size = peak_size(dtype, max_size, device=device)
        product = functools.partial(synced_mm, *random_square(size, dtype, device))
        out[name] = {**_interleave({name: product}, cfg, 2.0 * size**3)[name], "size": size}
    return out


LOSS_PATHS = (("autograd", False, "full"), ("fused", True, "full"), ("fused, corpus head", True, "corpus"))
"""(name, fused loss, head vocabulary) of the training paths timed side by side."""


def stages(run, cfg: OfflineBenchConfig) -> dict:
    """The pipeline's datastore, teacher and a capped training run on the sliced corpus, timed."""
    for folder in ("datastore", "eval", "teacher", "train-bench", "timings.json"):  # measure, never reuse
        path = run.path(folder)
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    keys = stage_datastore(run)["train"]  # {"tokens", "seconds"} of the training split's keys
    t0 = time.perf_counter()
    stage_teacher(run)
    timings = {"keys_train": {**keys, "tokens_per_s": keys["tokens"] / keys["seconds"]},
               "teacher": {"tokens": keys["tokens"], "seconds": time.perf_counter() - t0}}
    timings["teacher"]["tokens_per_s"] = keys["tokens"] / timings["teacher"]["seconds"]
    store = KeyStore(run.path("datastore"))
    teacher = TeacherStore(run.path("teacher"), datastore=store)
    train_cfg = run.cfg.train
    vocab_size = int(run.backbone[0].get_output_embeddings().weight.shape[0])
    steps = min(cfg.train_steps, store.num_rows // train_cfg.batch_size - 1)  # stop before the epoch's eval
    if steps < 2:
        raise ConfigError(f"train_tokens={cfg.train_tokens} gives fewer than 3 batches of {train_cfg.batch_size}")
    paths = {}
    for name, fused, vocab in LOSS_PATHS:  # the same data and steps; the loss path and the head's vocabulary
        head_vocab = head_vocabulary(vocab, store, teacher, vocab_size)
        data = TrainData(store.array("keys"), store.array("values"), teacher.array("ids"), teacher.array("probs"),
                         teacher.array("residual"), None if head_vocab is None else index_of(head_vocab, vocab_size))
        flops = train_flops_per_token(build_memory(run, head_vocab), data, train_cfg)
        shutil.rmtree(run.path("train-bench"), ignore_errors=True)
        state = train_memory(build_memory(run, head_vocab), data, eval_data(run, "validation"),
                             dataclasses.replace(train_cfg, fused_loss=fused), run.path("train-bench"),
                             progress=run.progress, stop_after=steps)
        paths[name] = {"seconds": state["train_seconds"], "tokens_per_s": state["tokens_per_s"],
                       "flops_per_token": flops, "head_tokens": vocab_size if head_vocab is None else len(head_vocab)}
    disk = sum(f.stat().st_size for f in run.path("teacher").glob("*.npy"))
    main = paths[next(name for name, fused, vocab in LOSS_PATHS
                      if (fused, vocab) == (train_cfg.fused_loss, run.cfg.memory.vocab))]
    return {"timings": timings, "train": {"steps": state["step"], "batch_size": train_cfg.batch_size,
                                          "seconds": main["seconds"], "tokens_per_s": main["tokens_per_s"],
                                          "precision": resolve_precision(train_cfg.precision),
                                          "flops_per_token": main["flops_per_token"],
                                          "loss_paths": paths,
                                          "fused_over_autograd": paths["fused"]["tokens_per_s"]
                                          / paths["autograd"]["tokens_per_s"],
                                          "corpus_head_over_autograd": paths["fused, corpus head"]["tokens_per_s"]
                                          / paths["autograd"]["tokens_per_s"]},
            "teacher": {"bytes_per_token": teacher.manifest["bytes_per_token"], "disk_bytes_per_token":
                        disk / teacher.num_rows, "rows": teacher.num_rows, "k": run.cfg.teacher.k,
                        "top_k": run.cfg.teacher.top_k, "index": vars(run.cfg.teacher.index)}}


def full_teacher_search(source_dir: str, teacher_cfg, cfg: OfflineBenchConfig, keys_tokens_per_s: float) -> dict | None:
    """Section 5: teacher search variants over the full run's datastore (None if it is not built)."""
    folder = Path(source_dir) / "datastore"
    if cfg.teacher_queries < 1 or not (folder / "manifest.json").exists():
        return None
    store = KeyStore(folder)
    values = store.array("values")
    n = store.num_rows
    rows = np.sort(np.random.default_rng(0).choice(n, min(cfg.teacher_queries, n), replace=False))
    queries = np.asarray(store.rows("keys")[rows], dtype=np.float32)
    k, batch = teacher_cfg.k, teacher_cfg.query_batch
    out = {}

    def teacher(index, name, nprobe=None, list_batches=True):
        def go():
            if nprobe is not None:
                index.index.nprobe = nprobe
            if isinstance(index, FaissIndex):
                index.list_batches = list_batches
            parts = []
            for b in range(0, len(rows), batch):
                d, i = index.search(queries[b : b + batch], k + 1)
                parts.append((i, knn_sparse(d, i, values, rows[b : b + batch], k, teacher_cfg.temperature,
                                            teacher_cfg.top_k)))
            out[name] = parts
        return go

    fns = _search_variants(store, teacher_cfg.index, Path(source_dir), teacher)
    per_s = _interleave(fns, cfg, len(rows))  # queries/s
    key_seconds = n / keys_tokens_per_s
    result = {"keys": n, "queries": len(rows), "k": k, "key_extraction_seconds_full": key_seconds, "variants": {}}
    for name, q in per_s.items():
        seconds = n / q["median"]
        result["variants"][name] = {"queries_per_s": q, "seconds_full": seconds, "over_keys": seconds / key_seconds,
                                    **_agreement(out["exact fp32"], out[name])}
    return result


def _search_variants(store, index_cfg, source_dir: Path, teacher) -> dict:
    """Exact fp32 (the reference), exact bf16 + fp32 re-rank, and the run's own IVF index (reopened from the
    run's teacher folder, else built in memory) at its nprobe and at a quarter of it."""
    keys = store.array("keys")
    fns = {"exact fp32": teacher(ExactIndex(keys), "exact fp32"),
           "exact bf16 + fp32 re-rank": teacher(ExactIndex(keys, precision="bf16"), "exact bf16 + fp32 re-rank")}
    kind = index_cfg.resolved_kind(store.num_rows)
    if kind == "exact":
        return fns
    try:
        index = FaissIndex.open(source_dir / "teacher" / "index", store, {"kind": kind, "config": index_cfg.settings()})
    except (CorruptArtifact, OSError):  # not saved (or stale): build it here, never written into the run's folder
        index = FaissIndex.build(store, index_cfg, kind)
    nprobe = index.index.nprobe
    for probes in dict.fromkeys([nprobe, max(1, nprobe // 4)]):
        name = f"run's {kind}, nprobe {probes}"
        fns[name] = teacher(index, name, probes)
    if kind == "ivf_flat":  # the same search without the list-by-list batches, the FAISS default
        name = f"run's {kind}, nprobe {nprobe}, query by query"
        fns[name] = teacher(index, name, nprobe, list_batches=False)
    return fns


def _agreement(reference: list, other: list) -> dict:
    """Neighbour recall and the total-variation distance of the sparse teacher rows against ``reference``."""
    recall, tv = [], []
    for (i_ref, (t_ref, p_ref, _)), (i_oth, (t_oth, p_oth, _)) in zip(reference, other):
        recall += [len(set(a) & set(b)) / len(a) for a, b in zip(i_ref.tolist(), i_oth.tolist())]
        for ids_a, pa, ids_b, pb in zip(t_ref.tolist(), p_ref.tolist(), t_oth.tolist(), p_oth.tolist()):
            da, db = dict(zip(ids_a, pa)), dict(zip(ids_b, pb))
            tv.append(0.5 * sum(abs(da.get(t, 0.0) - db.get(t, 0.0)) for t in (set(da) | set(db)) - {-1}))
    return {"neighbour_recall": float(np.mean(recall)), "target_tv_mean": float(np.mean(tv)),
            "target_tv_max": float(np.max(tv))}


# ---------------------------------------------------------------------------------------------
# The benchmark


def bench_run(config_path: str, cfg: OfflineBenchConfig, progress: bool = True):
    """A Run on the config's corpus capped to the bench slice, in ``cfg.out_dir``."""
    rc = PipelineConfig.from_yaml(config_path, cfg.overrides)
    source_dir = rc.run_dir
    if Path(cfg.out_dir).resolve() == Path(source_dir).resolve():
        raise ConfigError(f"bench offline rebuilds its folder: out_dir must not be the run's own {source_dir}")
    caps = {"train": cfg.train_tokens, "validation": cfg.eval_tokens, "test": cfg.eval_tokens}
    rc = dataclasses.replace(rc, run_dir=cfg.out_dir, corpus=dataclasses.replace(rc.corpus, max_tokens=caps),
                             teacher_temperature_from_knnlm=False)
    return Run(rc, progress=progress), source_dir


def run_bench(config_path: str, cfg: OfflineBenchConfig, progress: bool = True) -> dict:
    n_threads = threads(cfg.threads)
    run, source_dir = bench_run(config_path, cfg, progress)
    peak = matmul_peak(cfg.peak_size, cfg, compute_device("auto"))
    fwd = forward_vs_keys(run, cfg)
    st = stages(run, cfg)
    tr = st["train"]
    achieved = tr["flops_per_token"] * tr["tokens_per_s"]
    peak_key = "bf16" if tr["precision"] == "bf16" else "fp32"
    for path in tr["loss_paths"].values():
        path["fraction_of_peak"] = path["flops_per_token"] * path["tokens_per_s"] / peak[peak_key]["median"]
    full = Path(source_dir) / "timings.json"
    search = full_teacher_search(source_dir, run.cfg.teacher, cfg, st["timings"]["keys_train"]["tokens_per_s"])
    return {"forward_vs_keys": fwd, "stages": st, "matmul_peak_flops": peak, "full_teacher_search": search,
            "train_flops_per_s": achieved, "train_fraction_of_peak": achieved / peak[peak_key]["median"],
            "train_fraction_of_peak_fp32": achieved / peak["fp32"]["median"],
            "teacher_over_keys": st["timings"]["teacher"]["seconds"] / st["timings"]["keys_train"]["seconds"],
            "full_run_timings": json.loads(full.read_text()) if full.exists() else None,
            "full_run_dir": source_dir, "threads": n_threads, "config": asdict(cfg), "run_config": config_path}


def report(r: dict) -> str:
    fwd, st, tim = r["forward_vs_keys"], r["stages"], r["stages"]["timings"]
    cfg = r["config"]
    lines = [f"# Offline stages: speed on a capped slice ({cfg['train_tokens']:,} training tokens), "
             f"{r['threads']} threads\n",
             f"## Key pass vs plain forward ({fwd['windows']} windows, {fwd['input_tokens']:,} input tokens; "
             f"median [min-max] of {cfg['repeats']})\n"]
    tps = fwd["tokens_per_s"]
    base = tps["plain forward fp32"]["median"]
    lines += [markdown_table(["pass", "input tokens/s", "vs plain fp32"],
                             [[n, f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]", f"{s['median'] / base:.2f}"]
                              for n, s in tps.items()]), ""]
    rows = [["key extraction (stage_datastore, train split)", tim["keys_train"]["tokens"],
             f"{tim['keys_train']['seconds']:.1f}", f"{tim['keys_train']['tokens_per_s']:.0f}"],
            ["teacher (stage_teacher)", tim["teacher"]["tokens"], f"{tim['teacher']['seconds']:.1f}",
             f"{tim['teacher']['tokens_per_s']:.0f}"],
            *[[f"memory training, {name} head + loss ({st['train']['steps']} steps x {st['train']['batch_size']}, "
               f"{st['train']['precision']})", st["train"]["steps"] * st["train"]["batch_size"],
               f"{v['seconds']:.1f}", f"{v['tokens_per_s']:.0f}"] for name, v in st["train"]["loss_paths"].items()]]
    paths = [[name, f"{v['head_tokens']:,}", f"{v['tokens_per_s']:.0f}",
              f"{v['tokens_per_s'] / st['train']['loss_paths']['autograd']['tokens_per_s']:.2f}",
              f"{v['flops_per_token'] / 1e6:.1f}", f"{100 * v['fraction_of_peak']:.0f} %" if "fraction_of_peak" in v
              else "-"] for name, v in st["train"]["loss_paths"].items()]
    lines += ["## Pipeline stages on the slice\n",
              markdown_table(["stage", "tokens", "seconds", "tokens/s"], rows), "",
              f"Teacher / key-extraction time: **{r['teacher_over_keys']:.2f}** (target ≤ 1).", "",
              "## Memory training paths, side by side (same data and steps)\n",
              markdown_table(["head + loss", "head tokens", "tokens/s", "vs autograd", "MFLOP/token",
                              f"of the {st['train']['precision']} peak"], paths), "",
              f"Training tokens/s, fused / autograd: **{st['train']['fused_over_autograd']:.2f}**; fused with the "
              f"corpus head / autograd: **{st['train']['corpus_head_over_autograd']:.2f}** (target ≥ 3).", ""]
    peak = r["matmul_peak_flops"]
    lines += ["## Training against the measured matmul peak\n",
              f"Plain square matmul: fp32 {peak['fp32']['median'] / 1e9:.1f} GFLOP/s "
              f"({peak['fp32'].get('size', cfg['peak_size'])}²), bf16 {peak['bf16']['median'] / 1e9:.1f} GFLOP/s "
              f"({peak['bf16'].get('size', cfg['peak_size'])}²). Training: {st['train']['flops_per_token'] / 1e6:.1f} "
              f"MFLOP/token (FlopCounterMode, forward + backward) x {st['train']['tokens_per_s']:.0f} tokens/s = "
              f"{r['train_flops_per_s'] / 1e9:.1f} GFLOP/s = **{100 * r['train_fraction_of_peak']:.0f} %** of the "
              f"{st['train']['precision']} peak ({100 * r['train_fraction_of_peak_fp32']:.0f} % of the fp32 peak; "
              f"target ≥ 40 %).", ""]
    t = st["teacher"]
    lines += [f"Teacher: **{t['bytes_per_token']} B/token** by its manifest (top-{t['top_k']}: 6·K + 4), "
              f"{t['disk_bytes_per_token']:.0f} B/token on disk with .npy headers (target ≤ 400 B).", ""]
    search = r.get("full_teacher_search")
    if search:
        lines += [f"## Teacher search at full size ({search['keys']:,} keys, k = {search['k']}, "
                  f"{search['queries']:,} seeded queries; median [min-max] of {cfg['repeats']})\n",
                  markdown_table(["search", "queries/s", "teacher s at full size", "/ key extraction at full size",
                                  "neighbour recall vs exact", "target TV vs exact (mean / max)"],
                                 [[name, f"{v['queries_per_s']['median']:.0f} [{v['queries_per_s']['min']:.0f}-"
                                         f"{v['queries_per_s']['max']:.0f}]", f"{v['seconds_full']:.0f}",
                                   f"**{v['over_keys']:.2f}**", f"{v['neighbour_recall']:.4f}",
                                   f"{v['target_tv_mean']:.4f} / {v['target_tv_max']:.4f}"]
                                  for name, v in search["variants"].items()]), "",
                  f"Key extraction at full size: {search['key_extraction_seconds_full']:.0f} s at the slice's "
                  f"key-extraction rate.", ""]
    full = r.get("full_run_timings")
    if full and "teacher" in full and "keys_train" in full:
        lines += [f"## Full run, recorded by the pipeline (`{r['full_run_dir']}/timings.json`)\n",
                  markdown_table(["stage", "tokens", "seconds", "tokens/s"],
                                 [[k, v.get("tokens", v.get("queries", "")), f"{v['seconds']:.0f}",
                                   f"{v['tokens_per_s']:.0f}" if "tokens_per_s" in v else ""]
                                  for k, v in full.items()]), "",
                  f"Teacher / key extraction (training split): "
                  f"{full['teacher']['seconds'] / full['keys_train']['seconds']:.2f}.", ""]
    return "\n".join(lines)


def main(config_path: str, cfg: OfflineBenchConfig, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    results = run_bench(config_path, cfg, progress)
    results["seconds_total"] = time.perf_counter() - t0
    out = Path(cfg.out_dir)
    write_text(out / "bench-results.json", json.dumps(results, indent=1, default=str))
    text = report(results)
    write_text(out / "bench-report.md", text)
    print(text)
    print(f"results: {out / 'bench-results.json'}")
    return results
