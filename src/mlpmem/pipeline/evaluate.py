"""Evaluation of a finished run: the test table, the λ curve, the distribution statistics, the report.

Every number comes from the run folder: the evaluation keystores (keys, targets, backbone log-probs),
the kNN-LM results, the trained memory and the stage timings. λ for memory + backbone is chosen on
validation (lowest perplexity; ties to the smaller λ) and applied unchanged to test.
"""

from __future__ import annotations

import numpy as np
import torch

from mlpmem.backbone import KeyHook
from mlpmem.compute import model_device
from mlpmem.corpora.documents import document_lengths, make_windows
from mlpmem.datastore import KeyStore, pad_windows
from mlpmem.inference.perplexity import best_lambda, lambda_curve, perplexity, tokens_for_masses
from mlpmem.memory import MLPMemory
from mlpmem.memory.vocab import covered_perplexity
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.knnlm import open_neighbours
from mlpmem.pipeline.train import eval_data
from mlpmem.reporting.run_report import write_run_report
from mlpmem.teacher import aggregate_by_token, exclude_and_weight
from mlpmem.training.data import memory_logprobs
from mlpmem.training.selection import kept_evaluation
from mlpmem.utils.shards import read_json, write_json

LAMBDAS = [round(0.05 * i, 2) for i in range(21)]
MASS_FRACTIONS = (0.8, 0.99)


def _directory_bytes(path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def load_memory(run):
    model, tokenizer = run.backbone
    return MLPMemory.from_pretrained(run.layout.memory, backbone_model=model, backbone_tokenizer=tokenizer)


@torch.no_grad()
def distribution_stats(run, memory, num_positions: int = 1024) -> dict:
    """Mean number of tokens holding 80 % / 99 % of the mass for the LM, the kNN teacher and the memory.

    Measured on the first ``num_positions`` test positions (paper Tables 7-8).
    """
    cfg, (model, _) = run.cfg, run.backbone
    docs = split_tokens(run, "test")
    lm_rows, key_rows, n = [], [], 0
    for w in make_windows(document_lengths(docs), cfg.corpus.block_size, cfg.corpus.stride):
        ids, mask = pad_windows(docs, [w], device=model_device(model))
        with KeyHook(model, cfg.backbone.layer, cfg.backbone.site) as hook:
            logits = model(input_ids=ids, attention_mask=mask).logits[0]  # (T, V)
        lm_rows.append(torch.softmax(logits[w.positions], -1))
        key_rows.append(hook.keys[0, w.positions])
        n += lm_rows[-1].shape[0]
        if n >= num_positions:
            break
    p_lm = torch.cat(lm_rows)[:num_positions]  # (n, V)
    p_mem = torch.softmax(memory(torch.cat(key_rows)[:num_positions].to(model_device(memory))), -1)  # (n, V)
    knn = read_json(run.layout.knnlm_results, "knnlm results")["chosen"]
    dists, nbr = (a[:num_positions] for a in open_neighbours(run.layout.neighbours("test"), knn["k"]))
    values = KeyStore(run.layout.datastore).array("values")
    w = exclude_and_weight(torch.from_numpy(np.array(dists)), torch.from_numpy(np.array(nbr)), None, knn["k"],
                           knn["temperature"])
    _, p_knn = aggregate_by_token(torch.from_numpy(values[np.clip(nbr, 0, None)].astype(np.int64)), w, knn["k"])
    return {name: {f"{int(f * 100)}%": c.double().mean().item()
                   for f, c in zip(MASS_FRACTIONS, tokens_for_masses(p, MASS_FRACTIONS))}
            for name, p in (("backbone", p_lm), ("kNN", p_knn), ("memory", p_mem))}


def headline(run, results: dict, train: dict) -> dict:
    """The keys every run's ``results.json`` carries for comparison across runs: test PPL per method, tokens for
    80 % of the mass per distribution, epochs trained, training tokens/s and the precision it trained in."""
    state_path = run.layout.train / "train_state.json"
    state = read_json(state_path, "train state") if state_path.exists() else {}
    rows = KeyStore(run.layout.datastore).num_rows
    epochs = train["tokens"] / rows if train.get("tokens") else None
    kept = kept_evaluation(state)  # the evaluation of the weights kept (the best one, when restored)
    test, dist = results["test"], results["distribution"]
    return {
        "test_ppl": {"backbone": test["backbone"], "knnlm": test["knnlm"], "memory": test["memory"],
                     "joint": test["memory+backbone"],
                     "backbone_covered": test.get("backbone_covered", test["backbone"])},
        "memory_coverage": test["memory_coverage"],
        "mass80": {"backbone": dist["backbone"]["80%"], "knn": dist["kNN"]["80%"], "memory": dist["memory"]["80%"]},
        "epochs": epochs,
        "epochs_kept": kept["epoch"] if kept is not None and state.get("restored_best") else epochs,
        "stopped_early": state.get("stopped_early"),
        "train_tokens_per_s": train.get("tokens_per_s"),
        "train_precision": train.get("precision"),  # recorded with the training's timing, beside its tokens/s
    }


def stage_eval(run, num_positions: int = 1024) -> dict:
    """The test table of a run (and its PNG), written to ``run_dir/results.json`` and ``report.md``."""
    memory = load_memory(run).eval()
    knn = read_json(run.layout.knnlm_results, "knnlm results")
    splits = {}
    for split in ("validation", "test"):
        data = eval_data(run, split)
        splits[split] = (data.lm_logprob, memory_logprobs(memory, data.keys, data.targets))
    curve = lambda_curve(*splits["validation"], LAMBDAS)
    lam = best_lambda(curve)
    lm_test, mem_test = splits["test"]
    store = KeyStore(run.layout.datastore)
    train = run.timings().get("train", {})
    memory_ppl, coverage = covered_perplexity(mem_test)
    if coverage < 1.0:
        print(f"note: the memory's corpus head covers {100 * coverage:.1f} % of the test targets; p_mem is 0 on the "
              "rest (the mixture is not), and memory-alone perplexity is over the covered positions", flush=True)
    results = {
        "lambda": lam,
        "validation_curve": {str(k): v for k, v in curve.items()},
        "test_curve": {str(k): v for k, v in lambda_curve(lm_test, mem_test, LAMBDAS).items()},
        "test": {
            "backbone": perplexity(lm_test),
            "knnlm": knn["test"]["knnlm_ppl"],
            "memory": memory_ppl,
            "backbone_covered": perplexity(np.asarray(lm_test)[np.isfinite(np.asarray(mem_test))]),
            "memory+backbone": lambda_curve(lm_test, mem_test, [lam])[lam],
            "tokens": int(len(lm_test)),
            "memory_coverage": coverage,
        },
        "knnlm_chosen": knn["chosen"],
        "knnlm_validation_curve": {str(r["lambda"]): r["ppl"] for r in knn["sweep"]
                                   if (r["k"], r["temperature"]) == (knn["chosen"]["k"], knn["chosen"]["temperature"])},
        "memory_parameters": memory.num_parameters(),
        "memory_trainable_parameters": memory.num_parameters(trainable_only=True),
        "memory_bytes": _directory_bytes(run.layout.memory),
        "memory_tied_head": memory.config.tie_head,
        "datastore_bytes": _directory_bytes(store.path),
        "datastore_tokens": store.num_rows,
        "train_seconds": train.get("seconds"),
        "train_tokens_per_s": train.get("tokens_per_s"),
        "distribution": distribution_stats(run, memory, num_positions),
    }
    results.update(headline(run, results, train))
    write_json(run.layout.results, results)

    write_run_report(run, results)
    return results
