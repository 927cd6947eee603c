"""The experiment's stages: data, both models (matched), training, the three questions.

Layout under ``out_dir``: ``tokenizer/``, ``data/{split}.npz``, ``sizes.json`` (parameters and FLOPs
per token), ``mosaics/`` and ``transformer/`` (checkpoint, ``train_state.json``, final ``model/``),
``results.json``, ``results.md`` and ``three-questions.png``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from memory_mosaics.experiments import tasks
from memory_mosaics.experiments.bigbench import ARCHIVE_ENV
from memory_mosaics.experiments.config import MosaicsExperiment
from memory_mosaics.experiments.data import prepare_streams
from memory_mosaics.experiments.report import write_report
from memory_mosaics.experiments.trainer import evaluate_loss, train_model
from memory_mosaics.model import MosaicsForCausalLM
from memory_mosaics.transformer import (
    build_transformer,
    count_parameters,
    flops_per_token,
)
from mlpmem.errors import MlpmemError
from mlpmem.evaluation.choice import continuation_logprobs
from mlpmem.utils.shards import read_json, write_json

KINDS = ("mosaics", "transformer")


def build_models(exp: MosaicsExperiment, vocab_size: int) -> dict:
    """Both models, freshly initialised with the experiment seed (the Transformer matched in parameters)."""
    config = exp.model.mosaics_config(vocab_size)
    torch.manual_seed(exp.seed)
    return {"mosaics": MosaicsForCausalLM(config), "transformer": build_transformer(config, exp.seed)}


def sizes(models: dict, seq_len: int) -> dict:
    return {kind: {"parameters": count_parameters(m), "flops_per_token": flops_per_token(m, seq_len),
                   "intermediate_size": m.config.intermediate_size} for kind, m in models.items()}


def train_stage(exp: MosaicsExperiment, kinds=KINDS, progress: bool = True, rebuild: bool = False) -> dict:
    """Train the requested models (a finished one is skipped, an interrupted one resumes; ``rebuild``
    starts them from scratch)."""
    tokenizer, streams = prepare_streams(exp, progress)
    models = build_models(exp, len(tokenizer))
    out = Path(exp.out_dir)
    write_json(out / "sizes.json", {**sizes(models, exp.train.seq_len),
                                    "train_tokens": int(len(streams["train"][0])), "vocab_size": len(tokenizer)})
    states = {}
    for kind in kinds:
        folder = out / kind
        if rebuild:
            shutil.rmtree(folder, ignore_errors=True)
        if (folder / "model" / "config.json").is_file():
            states[kind] = read_json(folder / "train_state.json", f"{kind} training state")
            continue
        states[kind] = train_model(models[kind], streams, exp.train, folder, exp.seed, kind, progress)
    save_tokenizer_with_models(exp, kinds)
    return states


def save_tokenizer_with_models(exp: MosaicsExperiment, kinds=KINDS) -> None:
    """Copy the tokenizer into every trained model folder (so that each loads as a backbone by path)."""
    tokenizer = AutoTokenizer.from_pretrained(Path(exp.out_dir) / "tokenizer")
    for kind in kinds:
        folder = Path(exp.out_dir) / kind / "model"
        if (folder / "config.json").is_file() and not (folder / "tokenizer_config.json").is_file():
            tokenizer.save_pretrained(folder)


def load_trained(exp: MosaicsExperiment, kind: str):
    folder = Path(exp.out_dir) / kind / "model"
    if not (folder / "config.json").is_file():
        raise MlpmemError(f"{folder} not found: run `memory-mosaics train` first")
    if kind == "mosaics":
        return MosaicsForCausalLM.from_pretrained(folder).eval()
    return AutoModelForCausalLM.from_pretrained(folder).eval()


def evaluate_model(model, tokenizer, streams: dict, exp: MosaicsExperiment, cloze: list[dict] | None = None,
                   progress: bool = True) -> dict:
    """The three questions for one model (the cloze facts ``None``, not scored, without ``cloze`` items)."""
    cfg = exp.eval

    def scorer(pairs):
        return continuation_logprobs(model, tokenizer, pairs, batch_size=cfg.batch_size)

    t0 = time.perf_counter()
    res = {"test": evaluate_loss(model, *streams["test"], exp.train.seq_len, cfg.ppl_windows, cfg.batch_size),
           "cloze": None if cloze is None else tasks.accuracy(scorer, cloze), "new_knowledge": [], "icl": []}
    correct, distances = [], []
    for n in cfg.nk_documents:
        items = tasks.new_knowledge_items(n, cfg.nk_trials, cfg.cloze_choices, exp.seed)
        length = sum(len(tokenizer(it["context"])["input_ids"]) for it in items) / len(items)
        hits = tasks.correct(scorer, items)
        correct.append(hits)
        distances.append([len(tokenizer(it["context"][it["fact_at"] :])["input_ids"]) for it in items])
        res["new_knowledge"].append({"documents": n, "tokens": length, "accuracy": float(100.0 * hits.mean())})
        if progress:
            print(f"  new knowledge, {n} documents (~{length:.0f} tokens): {res['new_knowledge'][-1]['accuracy']:.1f}")
    res["new_knowledge_by_distance"] = tasks.by_distance(np.concatenate(correct), np.concatenate(distances))
    for labels in ("semantic", "anonymous"):
        for query in ("unseen", "seen"):
            for shots in cfg.icl_shots:
                if query == "seen" and shots == 0:
                    continue
                acc = tasks.accuracy(scorer, tasks.icl_items(shots, labels, query, cfg, exp.seed))
                res["icl"].append({"labels": labels, "query": query, "shots": shots, "accuracy": acc})
    res["eval_seconds"] = time.perf_counter() - t0
    return res


def eval_stage(exp: MosaicsExperiment, kinds=KINDS, progress: bool = True) -> dict:
    torch.set_num_threads(exp.train.threads)
    tokenizer, streams = prepare_streams(exp, progress)
    out = Path(exp.out_dir)
    results = {"config": exp.to_dict(), "sizes": read_json(out / "sizes.json", "model sizes"), "models": {}}
    cloze = tasks.cloze_items(exp.eval, exp.seed) if os.environ.get(ARCHIVE_ENV) else None
    if cloze is None and progress:
        print("cloze facts skipped: set MLPMEM_BIGBENCH_ARCHIVE to a copy of the BIG-bench archive to score them")
    for kind in kinds:
        if progress:
            print(f"three questions: {kind}")
        with torch.no_grad():
            results["models"][kind] = evaluate_model(load_trained(exp, kind), tokenizer, streams, exp, cloze,
                                                     progress)
        results["models"][kind]["train"] = read_json(out / kind / "train_state.json", f"{kind} training state")
        results["models"][kind]["train"].pop("history", None)
    write_json(out / "results.json", results)
    write_report(results, out)
    return results
