"""``python -m studies bench packing``: key extraction of short documents, one window per row vs packed rows,
in one run.

The corpus is the synthetic-facts memory corpus of the QA benchmark (:mod:`memory_mosaics.experiments.synthetic`:
biographies of a few dozen tokens each), capped at ``tokens``, tokenized by the config's backbone and cut into the
config's windows. Batches are the datastore stage's (:func:`~mlpmem.datastore.window_batches`,
``datastore.batch_size`` rows), each encoded by :func:`~mlpmem.datastore.encode_windows` (the truncated key pass)
at the config's precision. Timed side by side, interleaved repetition by repetition after a warm-up:

- ``one window per row``: a document per row, right-padded to the longest of its batch;
- ``packed``: consecutive documents packed into rows of ``block_size`` tokens (document mask, restarting
  positions);
- ``long text``: the same tokens joined into one document (full windows at block/stride): the rate of the
  datastore stage on long documents, for reference.

Reported: datastore rows (scored targets) per second and input tokens per second, median [min-max]; the ratio of
medians packed / one window per row is the gain, and the same ratio within each round (the two passes of a round
run back to back, so a load spike of a shared machine mostly hits both). Agreement of the packed keys with the
one-per-row keys at the run's precision and in fp32 (largest absolute and relative Frobenius difference); rows and
next tokens must be equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from memory_mosaics.experiments.synthetic import SyntheticConfig, generate
from mlpmem.backbone import load_backbone, resolve_layer
from mlpmem.compute import model_device, resolve_precision
from mlpmem.config import Config
from mlpmem.corpora.documents import Document, Windows, make_windows, tokenize_documents
from mlpmem.datastore import encode_windows, packing_check, window_batches
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.reporting.tables import markdown_table
from studies.bench.common import interleave, summarize, threads, write_text

UNPACKED, PACKED, LONG = "one window per row", "packed", "long text (reference)"


@dataclass
class PackingBenchConfig(Config):
    tokens: int = 3_000
    """Tokens of the synthetic-facts corpus encoded by each variant."""
    entities: int = 120
    """Entities of the synthetic benchmark (the QA report's size); documents are taken in order up to ``tokens``."""
    repeats: int = 3
    warmup: int = 1
    agreement_tokens: int = 600
    """Tokens of the fp32 packed vs one-per-row key comparison (0 skips it)."""
    threads: int | None = None
    docs_dir: str = "docs/results/speed"
    """Where ``packing.md`` and ``packing.json`` are written."""

    def validate(self) -> None:
        if self.tokens < 2 or self.repeats < 1 or self.warmup < 0 or self.agreement_tokens < 0:
            raise ConfigError("bench packing needs tokens >= 2, repeats >= 1, warmup >= 0, agreement_tokens >= 0")


def facts_corpus(tokenizer, tokens: int, entities: int) -> list[np.ndarray]:
    """The first synthetic-facts training documents, tokenized, up to ``tokens`` tokens."""
    texts = generate(SyntheticConfig(num_entities=entities)).documents["train"]
    docs, total = [], 0
    for arr in tokenize_documents([Document(d["id"], d["text"]) for d in texts], tokenizer):
        docs.append(arr)
        total += len(arr)
        if total >= tokens:
            return docs
    raise ConfigError(f"{entities} synthetic entities hold {total} tokens, fewer than the {tokens} asked for")


@dataclass
class Variant:
    docs: list[np.ndarray]
    batches: list[Windows]
    pack_into: int | None

    @property
    def rows(self) -> int:
        return sum(b.num_scored for b in self.batches)

    @property
    def input_tokens(self) -> int:
        return int(sum((b.rows[:, 2] - b.rows[:, 1]).sum() for b in self.batches))


def variants(docs: list[np.ndarray], block: int, stride: int, batch_size: int) -> dict[str, Variant]:
    windows = make_windows([len(d) for d in docs], block, stride)
    joined = [np.concatenate(docs)]
    long = make_windows([len(joined[0])], block, stride)
    return {UNPACKED: Variant(docs, window_batches(windows, batch_size, None), None),
            PACKED: Variant(docs, window_batches(windows, batch_size, block), block),
            LONG: Variant(joined, window_batches(long, batch_size, None), None)}


def encode(model, variant: Variant, layer: int, site: str, precision: str) -> tuple[np.ndarray, np.ndarray]:
    """Keys (fp16) and next tokens of every batch of ``variant``, as the datastore stage encodes them."""
    parts = [encode_windows(model, variant.docs, b, layer, site, False, precision, variant.pack_into)
             for b in variant.batches]
    return np.concatenate([p.keys for p in parts]), np.concatenate([p.values for p in parts])


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    a, b = a.astype(np.float32), b.astype(np.float32)
    return {"max_abs": float(np.abs(a - b).max()), "relative": float(np.linalg.norm(a - b) / np.linalg.norm(a)),
            "key_abs_max": float(np.abs(a).max())}


def timed_variants(model, runs: dict[str, Variant], layer: int, site: str, precision: str, cfg: PackingBenchConfig):
    """Seconds of each variant (interleaved rounds) and its last keys and next tokens."""
    out = {}

    def timed(name: str, variant: Variant):
        def go():
            out[name] = encode(model, variant, layer, site, precision)
        return go

    with torch.no_grad():
        seconds = interleave({name: timed(name, v) for name, v in runs.items()}, cfg.warmup, cfg.repeats)
    (keys, values), (packed_keys, packed_values) = out[UNPACKED], out[PACKED]
    if not (np.array_equal(values, packed_values) and keys.shape == packed_keys.shape):
        raise MlpmemError("packed extraction gave other rows than one window per row")
    return seconds, agreement(keys, packed_keys)


def _rates(v: Variant, seconds: dict[str, list[float]]) -> dict:
    return {"rows": v.rows, "input_tokens": v.input_tokens, "forwards": len(v.batches),
            **{f"rows_per_{clock}_s": summarize([v.rows / t for t in seconds[clock]]) for clock in seconds},
            **{f"input_tokens_per_{clock}_s": summarize([v.input_tokens / t for t in seconds[clock]])
               for clock in seconds}}


def run_bench(config_path: str, cfg: PackingBenchConfig) -> dict:
    rc = PipelineConfig.from_yaml(config_path)
    used_threads = threads(cfg.threads)
    model, tokenizer = load_backbone(rc.backbone.name)
    layer, site = resolve_layer(model, rc.backbone.layer), rc.backbone.site
    precision = resolve_precision(rc.backbone.precision, model_device(model))
    reason = packing_check(model, layer, site)
    if reason is not None:
        raise MlpmemError(f"backbone {rc.backbone.name!r} cannot run packed rows: {reason}")
    block, stride, batch = rc.corpus.block_size, rc.corpus.stride, rc.datastore.batch_size
    docs = facts_corpus(tokenizer, cfg.tokens, cfg.entities)
    runs = variants(docs, block, stride, batch)
    seconds, agree = timed_variants(model, runs, layer, site, precision, cfg)
    command = (f"python -m studies bench packing {config_path} --tokens {cfg.tokens} --repeats {cfg.repeats} "
               f"--threads {used_threads}")
    result = {"command": command, "backbone": rc.backbone.name,
              "layer": layer, "site": site, "precision": precision, "block_size": block, "stride": stride,
              "batch_size": batch, "threads": used_threads, "repeats": cfg.repeats, "warmup": cfg.warmup,
              "documents": len(docs), "document_tokens": summarize([float(len(d)) for d in docs]),
              "variants": {name: _rates(v, seconds[name]) for name, v in runs.items()},
              f"agreement_{precision}": agree}
    for clock in ("wall", "cpu"):
        med = {n: r[f"rows_per_{clock}_s"]["median"] for n, r in result["variants"].items()}
        result[f"packed_over_unpacked_{clock}"] = med[PACKED] / med[UNPACKED]
        result[f"packed_over_unpacked_{clock}_paired"] = summarize(
            [u / p for u, p in zip(seconds[UNPACKED][clock], seconds[PACKED][clock])])
        result[f"packed_over_long_text_{clock}"] = med[PACKED] / med[LONG]
    if cfg.agreement_tokens:
        result["agreement_tokens"] = cfg.agreement_tokens
        few = variants(facts_corpus(tokenizer, cfg.agreement_tokens, cfg.entities), block, stride, batch)
        with torch.no_grad():
            reference = encode(model, few[UNPACKED], layer, site, "fp32")[0]
            result["agreement_fp32"] = agreement(reference, encode(model, few[PACKED], layer, site, "fp32")[0])
            if precision != "fp32":  # the scale of rounding: the same keys at the run's precision vs fp32
                result["precision_vs_fp32"] = agreement(reference, encode(model, few[UNPACKED], layer, site,
                                                                          precision)[0])
    return result


def _spread(s: dict) -> str:
    return f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"


def _ratio_line(r: dict, clock: str, what: str) -> str:
    paired = r[f"packed_over_unpacked_{clock}_paired"]
    return (f"Packed / one window per row, {what}: **{r[f'packed_over_unpacked_{clock}']:.2f}x** (ratio of medians; "
            f"within each round {paired['median']:.2f} [{paired['min']:.2f}-{paired['max']:.2f}]); packed / long text "
            f"{r[f'packed_over_long_text_{clock}']:.2f}.")


def report(r: dict) -> str:
    base = r["variants"][UNPACKED]
    rows = [[name, v["forwards"], v["rows"], v["input_tokens"], _spread(v["rows_per_wall_s"]),
             _spread(v["rows_per_cpu_s"]), _spread(v["input_tokens_per_wall_s"]),
             f"{v['rows_per_wall_s']['median'] / base['rows_per_wall_s']['median']:.2f}",
             f"{v['rows_per_cpu_s']['median'] / base['rows_per_cpu_s']['median']:.2f}"]
            for name, v in r["variants"].items()]
    table = markdown_table(["variant", "forwards", "datastore rows", "input tokens", "rows/s", "rows/CPU-s",
                            "input tokens/s", "vs one per row", "vs one per row (CPU)"], rows)
    doc = r["document_tokens"]
    lines = [f"# Key extraction of short documents: packed rows vs one window per row, {r['threads']} threads", "",
             f"{r['documents']} synthetic-facts documents ({doc['min']:.0f}-{doc['max']:.0f} tokens, median "
             f"{doc['median']:.0f}); backbone {r['backbone']} (layer {r['layer']}, {r['site']}), {r['precision']}, "
             f"windows {r['block_size']}/{r['stride']}, batches of {r['batch_size']} rows; median [min-max] of "
             f"{r['repeats']} interleaved repetitions after {r['warmup']} warm-up. Rows/s: wall clock; rows/CPU-s: "
             "this process's CPU time (all its threads).", "", table, "",
             _ratio_line(r, "wall", "datastore rows/s"), "", _ratio_line(r, "cpu", "datastore rows per CPU-second"),
             "", "Rows and next tokens: equal.", ""]
    few = f" (first {r.get('agreement_tokens')} tokens)"
    for name, scope in {f"agreement_{r['precision']}": "", "agreement_fp32": few}.items():
        if name in r:
            a = r[name]
            lines.append(f"Keys packed vs one per row, {name.split('_')[1]}{scope}, stored fp16: max |Δ| "
                         f"{a['max_abs']:.2g} (keys up to {a['key_abs_max']:.3g}), relative Frobenius difference "
                         f"{a['relative']:.2g}.")
    if "precision_vs_fp32" in r:
        a = r["precision_vs_fp32"]
        lines.append(f"For scale, the same keys one window per row, {r['precision']} vs fp32{few}: max |Δ| "
                     f"{a['max_abs']:.2g}, relative Frobenius difference {a['relative']:.2g}.")
    lines += ["", f"Command: `{r['command']}`."]
    return "\n".join(lines)


def main(config_path: str, cfg: PackingBenchConfig) -> dict:
    results = run_bench(config_path, cfg)
    out = Path(cfg.docs_dir)
    write_text(out / "packing.json", json.dumps(results, indent=1))
    text = report(results)
    write_text(out / "packing.md", text)
    print(text)
    return results
