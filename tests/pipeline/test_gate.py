"""``mlpmem gate`` on a finished tiny run: the gate and its report are written, the fixed-λ perplexity is the
evaluation's own, training never reads the test split, and the model's gated forward gives the offline numbers."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mlpmem.pipeline.gate as gate_stage
import mlpmem.utils.shards
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.runs import copy_run, corpus_of
from mlpmem.cli import main
from mlpmem.corpora.documents import document_lengths, make_windows
from mlpmem.errors import FingerprintMismatch
from mlpmem.inference.gate_io import GATE_CONFIG, GATE_WEIGHTS, load_gate
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.perplexity import perplexity
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import split_tokens
from mlpmem.pipeline.run import Run
from mlpmem.utils.shards import read_json

TINY = "tiny"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_backbone_dir, tiny_run):
    """A copy of the session's finished tiny run with its gate trained by the command, and the options naming its
    backbone and corpus."""
    root = tmp_path_factory.mktemp("gate")
    copy_run(tiny_run, root / "run")
    common = ["--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus_of(tiny_run)}",
              "--set", "gate.key_dim=2"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlpmem.utils.shards, "FSYNC", False)
        mp.setenv("MLPMEM_THREADS", "1")
        assert main(["gate", TINY, *common, "--set", f"run_dir={root / 'run'}", "--report", str(root / "report")]) == 0
    return root, common


def open_run(folder, common) -> Run:
    sets = [common[i + 1] for i, word in enumerate(common) if word == "--set"] + [f"run_dir={folder}"]
    return Run(PipelineConfig.from_yaml(TINY, sets), progress=False)


def test_the_command_writes_the_gate_and_its_report(finished):
    root, _ = finished
    gate_dir, report = root / "run" / "gate", root / "report"
    for name in (GATE_CONFIG, GATE_WEIGHTS, "features-validation.npz", "features-test.npz", "results.json",
                 "report.md", "lambda_hist-run.png"):
        assert (gate_dir / name).is_file(), name
    results = read_json(report / "results.json", "gate results")
    entry = results["corpora"]["run"]
    run_results = read_json(root / "run" / "results.json", "run results")
    assert entry["lambda_fixed"] == run_results["lambda"]
    assert math.isclose(entry["ppl_fixed"], run_results["test"]["memory+backbone"], rel_tol=1e-12)
    assert math.isclose(entry["ppl_backbone"], run_results["test"]["backbone"], rel_tol=1e-12)
    assert 0.0 <= entry["mean_gate"] <= 1.0 and "decode_ratio" not in entry and results["decode_ratio"] is None
    assert entry["train"]["features"]["max_abs_dlogp_lm"] < 1e-4  # the recomputed backbone lines up with the store
    assert entry["train"]["holdout_ppl_best"] <= entry["train"]["holdout_ppl_init"]
    text = (report / "report.md").read_text()
    assert "lambda_hist-run.png" in text and "Not yet measured" in text and (report / "lambda_hist-run.png").is_file()


def test_a_rerun_reuses_the_features_and_trains_the_same_gate(finished, tmp_path):
    root, common = finished
    folder = tmp_path / "run"
    shutil.copytree(root / "run", folder)
    before = (folder / "gate" / GATE_WEIGHTS).read_bytes()
    assert main(["gate", TINY, *common, "--set", f"run_dir={folder}"]) == 0
    entry = read_json(folder / "gate" / "results.json", "gate results")["corpora"]["run"]
    assert entry["features"]["cached"] and entry["train"]["features"]["cached"]
    assert (folder / "gate" / GATE_WEIGHTS).read_bytes() == before  # seeded
    assert "decode_ratio" not in entry


def test_training_never_reads_the_test_split(finished, tmp_path, monkeypatch):
    root, common = finished
    folder = tmp_path / "run"
    shutil.copytree(root / "run", folder)
    shutil.rmtree(folder / "gate")
    for gone in (folder / "eval" / "test", folder / "tokens" / "test"):
        shutil.rmtree(gone)  # training must not need them
    opened = []
    real_split_tokens, real_keystore = gate_stage.split_tokens, gate_stage.KeyStore
    monkeypatch.setattr(gate_stage, "split_tokens", lambda run, split: opened.append(split) or
                        real_split_tokens(run, split))
    monkeypatch.setattr(gate_stage, "KeyStore", lambda path, *a, **k: opened.append(str(path)) or
                        real_keystore(path, *a, **k))
    run = open_run(folder, common)
    memory = gate_stage.load_run_memory(run)
    gate, summary = gate_stage.train_run_gate(run, memory, run.cfg.gate, gate_stage.fixed_lambda(run))
    assert sorted(Path(o).name for o in opened) == ["validation", "validation"]  # its keystore, its tokens
    assert summary["split"] == "validation"
    assert (folder / "gate" / GATE_WEIGHTS).read_bytes() == (root / "run" / "gate" / GATE_WEIGHTS).read_bytes()


@torch.no_grad()
def test_the_gated_model_gives_the_offline_test_perplexity(finished):
    root, common = finished
    run = open_run(root / "run", common)
    model, tokenizer = run.backbone
    mixed = MemoryAugmentedForCausalLM.from_memory(run.layout.memory, model, tokenizer, gate_dir=run.layout.gate)
    docs = split_tokens(run, "test")
    logprobs, lambdas = [], []
    for w in make_windows(document_lengths(docs), run.cfg.corpus.block_size, run.cfg.corpus.stride):
        ids = torch.from_numpy(np.asarray(docs[w.doc][w.start : w.end], np.int64))[None]  # (1, T)
        out = mixed(input_ids=ids).logits[0, w.positions]  # (n, V)
        targets = ids[0, w.first_target - w.start :]
        logprobs.append(out.gather(1, targets[:, None])[:, 0].double())
        lambdas.append(mixed.last_lambda[0, w.positions])
    entry = read_json(run.layout.gate / "results.json", "gate results")["corpora"]["run"]
    assert math.isclose(perplexity(torch.cat(logprobs)), entry["ppl_gate"], rel_tol=1e-3)  # fp16 keys offline
    assert math.isclose(torch.cat(lambdas).mean().item(), entry["mean_gate"], rel_tol=1e-3)


def test_a_gate_of_the_run_refuses_another_runs_memory(finished, tmp_path):
    root, common = finished
    run = open_run(root / "run", common)
    memory = gate_stage.load_run_memory(run)
    with torch.no_grad():
        memory.norm.weight.add_(1e-3)  # another memory (retrained) next to the old gate
    with pytest.raises(FingerprintMismatch, match="another memory"):
        load_gate(run.layout.gate, memory)


def test_generate_with_the_gate_continues_the_prompt_as_the_gated_model_does(finished, capsys):
    root, common = finished
    folder = ["--set", f"run_dir={root / 'run'}"]
    capsys.readouterr()
    assert main(["generate", TINY, *common, *folder, "--prompt", "the cat", "--max-new-tokens", "4", "--gate"]) == 0
    text = capsys.readouterr().out.strip()
    run = open_run(root / "run", common)
    model, tokenizer = run.backbone
    memory = gate_stage.load_run_memory(run)
    mixed = MemoryAugmentedForCausalLM.from_parts(model, memory, lam=0.5, tokenizer=tokenizer,
                                                  gate=load_gate(run.layout.gate, memory))
    inputs = tokenizer(["the cat"], return_tensors="pt")
    out = mixed.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert text == tokenizer.decode(out[0], skip_special_tokens=True)
    assert mixed.last_lambda is not None


def test_generate_gate_refuses_lam_and_a_run_without_a_gate(finished, tmp_path, capsys):
    root, common = finished
    args = ["generate", TINY, *common, "--prompt", "the cat", "--max-new-tokens", "2", "--gate"]
    assert main([*args, "--set", f"run_dir={root / 'run'}", "--lam", "0.3"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    bare = tmp_path / "run"
    shutil.copytree(root / "run", bare, ignore=shutil.ignore_patterns("gate"))
    assert main([*args, "--set", f"run_dir={bare}"]) == 2
    assert "mlpmem gate" in capsys.readouterr().err


def test_the_memory_gate_method_mixes_with_the_runs_gate(finished, tmp_path):
    from mlpmem.baselines.methods import build_method
    from mlpmem.errors import ConfigError

    root, common = finished
    run = open_run(root / "run", common)
    built = build_method("memory-gate", root / "run", run.backbone)
    lam = read_json(root / "run" / "results.json", "run results")["lambda"]
    assert built.model.gate is not None and built.info == {"gate": True, "lambda_fixed": lam}
    bare = tmp_path / "run"
    shutil.copytree(root / "run", bare, ignore=shutil.ignore_patterns("gate"))
    with pytest.raises(ConfigError, match="mlpmem gate"):
        build_method("memory-gate", bare, run.backbone)
