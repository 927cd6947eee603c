"""``python -m studies update-text RUN --out DIR``: update a finished Shakespeare run with plays it did not see
(issue 18).

The run folder is copied to ``DIR/run`` (without its ablations), so the original stays as it was. Each of the
first ``plays`` unused plays of the run's corpus (the plays ``shakespeare-by-play`` left out, in its sha256
order) is split by tokens: its first ``add_tokens`` join the copy by ``mlpmem update`` (one document per play);
the next ``eval_tokens`` are held out. Before and after the update, on the held-out part of the new plays and on
the run's own test split (the old test play), the study measures the perplexity of the backbone and of
memory + backbone at the run's validation λ: does the memory take in the new plays without losing the old test
play? Writes ``DIR/report.md`` and ``DIR/results.json`` (and the same to ``--docs`` if given).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

from mlpmem.compute import resolve_precision
from mlpmem.corpora.shakespeare import download_shakespeare, read_shakespeare_archive
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import ConfigError
from mlpmem.inference.perplexity import lambda_curve, perplexity
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.finetune import load_memory
from mlpmem.maintenance.update import update_run
from mlpmem.pipeline.corpus import corpus_folder
from mlpmem.pipeline.hf_export import open_run
from mlpmem.pipeline.run import Run
from mlpmem.pipeline.train import eval_data
from mlpmem.reporting.tables import markdown_table
from mlpmem.training.data import memory_logprobs
from mlpmem.utils.io import write_jsonl
from mlpmem.utils.runtime import set_threads
from mlpmem.utils.shards import read_json, write_json

NEW, OLD = "new plays (held-out part)", "old test play"


def unused_plays(run: Run, count: int) -> list[tuple[str, str]]:
    """``(title, text)`` of the first ``count`` plays the run's Shakespeare corpus left unused."""
    meta_path = corpus_folder(run) / "meta.json"
    meta = read_json(meta_path, "corpus meta") if meta_path.is_file() else {}
    titles = meta.get("unused_plays")
    if not titles:
        raise ConfigError(f"{run.dir}: its corpus names no unused plays ({meta_path}): update-text needs a "
                          "shakespeare-by-play run")
    if count > len(titles):
        raise ConfigError(f"--plays {count}: the corpus left only {len(titles)} plays unused")
    works = {w["title"]: w["text"] for w in read_shakespeare_archive(download_shakespeare()).values()}
    return [(t, works[t]) for t in titles[:count]]


def split_plays(run: Run, plays: list[tuple[str, str]], add_tokens: int, eval_tokens: int):
    """``(documents to add, held-out token arrays)``: each play's first ``add_tokens`` tokens as a document and
    the next ``eval_tokens`` tokens held out."""
    tokenizer = run.backbone[1]
    docs, held = [], []
    for title, text in plays:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < add_tokens + eval_tokens:
            raise ConfigError(f"{title} has {len(ids)} tokens, fewer than --add-tokens + --eval-tokens")
        docs.append({"id": f"update-text:{title}", "text": tokenizer.decode(ids[:add_tokens])})
        held.append(np.asarray(ids[add_tokens : add_tokens + eval_tokens], np.int64))
    return docs, held


def held_out_store(run: Run, held: list[np.ndarray], folder: Path) -> KeyStore:
    """Keys and backbone log-probs of the held-out tokens, encoded as the run encodes its test split."""
    model, tokenizer = run.backbone
    cfg = run.cfg
    config = KeystoreConfig(layer=cfg.backbone.layer, site=cfg.backbone.site, block_size=cfg.corpus.block_size,
                            stride=cfg.corpus.stride, with_lm=True,
                            precision=resolve_precision(cfg.backbone.precision, model.device))
    build_keystore(config, model, tokenizer, held, folder, progress=False, desc="keys held-out")
    return KeyStore(folder)


def perplexities(run: Run, stores: dict, lam: float) -> dict:
    """Per text: backbone and memory + backbone (at ``lam``) perplexity with the run's current memory."""
    memory = load_memory(run).eval()
    out = {}
    for name, (keys, targets, lm) in stores.items():
        mem = memory_logprobs(memory, keys, targets)
        out[name] = {"backbone": perplexity(lm), "joint": lambda_curve(lm, mem, [lam])[lam], "tokens": len(lm)}
    return out


def run_update_text(run_dir: Path, out: Path, plays: int = 1, add_tokens: int = 16000, eval_tokens: int = 4000,
                    maintenance: list[str] | None = None) -> dict:
    set_threads()
    if (out / "run").exists():
        raise ConfigError(f"{out} already holds a study (run/): give another --out")
    source = open_run(run_dir)
    lam = float(read_json(source.layout.results, "run results (evaluate the run first)")["lambda"])
    shutil.copytree(source.dir, out / "run", ignore=shutil.ignore_patterns("ablations"))
    run = open_run(out / "run")
    docs, held = split_plays(run, unused_plays(run, plays), add_tokens, eval_tokens)
    write_jsonl(out / "added.jsonl", docs)
    new = held_out_store(run, held, out / "held-out")
    test = eval_data(run, "test")
    stores = {NEW: (new.array("keys"), new.array("values"), new.array("lm")),
              OLD: (test.keys, test.targets, test.lm_logprob)}
    before = perplexities(run, stores, lam)
    t0 = time.perf_counter()
    summary = update_run(run, out / "added.jsonl", load_maintenance_config(overrides=maintenance or []))
    seconds = time.perf_counter() - t0
    after = perplexities(run, stores, lam)
    results = {"run": str(run_dir), "lambda": lam, "plays": [d["id"].split(":", 1)[1] for d in docs],
               "add_tokens": add_tokens, "eval_tokens": eval_tokens, "update_seconds": seconds,
               "update": {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))},
               "before": before, "after": after}
    write_report(out, results)
    return results


def write_report(out: Path, results: dict) -> None:
    rows = [[name, f"{results['before'][name]['tokens']:,}", f"{results['before'][name]['backbone']:.3f}",
             f"{results['before'][name]['joint']:.3f}", f"{results['after'][name]['joint']:.3f}",
             f"{results['after'][name]['joint'] / results['before'][name]['joint']:.3f}"] for name in (NEW, OLD)]
    table = markdown_table(["text", "tokens", "backbone", "memory + backbone before", "memory + backbone after",
                            "after / before"], rows)
    text = (f"# Updating a Shakespeare run with plays it did not see\n\n"
            f"`python -m studies update-text {results['run']} --out DIR` (see `studies.update.text`): the first "
            f"{results['add_tokens']:,} tokens of {', '.join(results['plays'])} added by `mlpmem update`, the next "
            f"{results['eval_tokens']:,} held out; memory mixed at the run's validation λ = {results['lambda']:g}. "
            f"Test perplexity:\n\n{table}\n\nThe update took {results['update_seconds']:.0f} s (keys of the added "
            "tokens, their teacher rows, the fine-tuning with replay).\n")
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    (out / "report.md").write_text(text)


def cmd_update_text(args: argparse.Namespace) -> None:
    out = Path(args.out)
    results = run_update_text(Path(args.run), out, args.plays, args.add_tokens, args.eval_tokens, args.set)
    if args.docs:
        write_report(Path(args.docs), results)
    print((out / "report.md").read_text())
