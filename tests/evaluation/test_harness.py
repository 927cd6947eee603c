"""The lm-eval adapter on a finished tiny run: its scores are our own mixing's, on local JSON tasks, offline.

loglikelihood equals the sum of the mixed log-probs computed directly (memory, backbone, kNN-LM),
loglikelihood_rolling equals the wrapper's own causal-LM loss on the same text, generate_until is the
wrapper's greedy continuation cut at the stop string; ``mlpmem lm-eval`` and lm-eval's ``hf`` type on a
saved folder give the same scores; bad model arguments are one-line errors.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import DOCS, direct_loglikelihood, generation_task, greedy_text, run_lambda, scores
from mlpmem.backbone import load_backbone
from mlpmem.baselines.methods import build_method
from mlpmem.cli import main
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import MlpmemLM, evaluate
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.pipeline.hf_export import augmented_from_run

# fixtures ``run_dir`` (a finished tiny run) and ``tasks`` (the 3-item local tasks): tests/evaluation/conftest.py


def test_from_run_is_the_generate_commands_model(run_dir):
    """λ "auto" is the run's validation choice; the logits are those of the model built from the run's memory."""
    model = augmented_from_run(run_dir)
    assert isinstance(model, MemoryAugmentedForCausalLM) and model.lam == run_lambda(run_dir)
    backbone, tokenizer = load_backbone(model.config.backbone)
    plain = MemoryAugmentedForCausalLM.from_memory(run_dir / "memory", backbone, tokenizer, lam=model.lam)
    ids = torch.tensor([tokenizer.encode(DOCS[0]["text"])])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, plain(input_ids=ids).logits)
    assert augmented_from_run(run_dir, lam=0.25).lam == 0.25
    with pytest.raises(ConfigError, match="no learned gate"):
        augmented_from_run(run_dir, gate=True)


def test_gate_dir_loads_another_gate_of_the_runs_memory_only(run_dir, tmp_path):
    from mlpmem.errors import FingerprintMismatch
    from mlpmem.inference.gate import Gate, GateConfig
    from mlpmem.inference.gate_io import save_gate
    from mlpmem.memory import MemoryConfig, MLPMemory

    model = augmented_from_run(run_dir)
    memory = model.memory
    gate = Gate(GateConfig(hidden_size=4)).set_constant(0.3)
    save_gate(gate, tmp_path / "mine", memory)
    gated = augmented_from_run(run_dir, gate=True, gate_offset=1.0, gate_dir=tmp_path / "mine", gate_floor=0.5)
    backbone, tokenizer = load_backbone(model.config.backbone)
    plain = MemoryAugmentedForCausalLM.from_memory(run_dir / "memory", backbone, tokenizer, gate_dir=tmp_path / "mine")
    plain.gate.set_offset(1.0).set_floor(0.5)
    assert gated.gate.floor == 0.5
    ids = torch.tensor([tokenizer.encode(DOCS[0]["text"])])
    with torch.no_grad():
        assert torch.equal(gated(input_ids=ids).logits, plain(input_ids=ids).logits)
    other = MLPMemory(MemoryConfig(**{**memory.config.to_dict(), "intermediate_size": 8}))
    save_gate(gate, tmp_path / "other", other)
    with pytest.raises(FingerprintMismatch, match="another memory"):
        augmented_from_run(run_dir, gate=True, gate_dir=tmp_path / "other")
    with pytest.raises(ConfigError, match="holds no gate"):
        augmented_from_run(run_dir, gate=True, gate_dir=tmp_path)


@pytest.mark.parametrize("lam", ["auto", 0.0, 1.0])
def test_loglikelihood_is_the_sum_of_the_mixed_log_probs(run_dir, tasks, lam):
    lm = MlpmemLM(run=str(run_dir), lam=lam, batch_size=2)
    got = scores(lm, tasks)["tiny_ll"]
    backbone, tokenizer = load_backbone(lm.model.config.backbone)
    plain = MemoryAugmentedForCausalLM.from_memory(run_dir / "memory", backbone, tokenizer,
                                              lam=run_lambda(run_dir) if lam == "auto" else lam)
    for doc, (loglik, _) in zip(DOCS, got):
        expected = direct_loglikelihood(lambda ids: plain(input_ids=ids).logits, tokenizer, doc["context"],
                                        doc["target"])
        assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)
    if lam == 0.0:  # the backbone exactly (lm-eval's log_softmax of log-probs only rounds)
        for doc, (loglik, _) in zip(DOCS, got):
            expected = direct_loglikelihood(lambda ids: F.log_softmax(backbone(input_ids=ids).logits, -1),
                                            tokenizer, doc["context"], doc["target"])
            assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)


def test_loglikelihood_rolling_is_the_wrappers_perplexity_loss(run_dir, tasks):
    lm = MlpmemLM(run=str(run_dir), batch_size=3)
    got = scores(lm, tasks, ("tiny_roll",))["tiny_roll"]
    model, tokenizer = lm.model, lm.tokenizer
    for doc, loglik in zip(DOCS, got):
        ids = torch.tensor([[lm.prefix_token_id, *tokenizer.encode(doc["text"])]])  # lm-eval's first window
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss  # mean NLL of the mixture over the text's tokens
        assert math.isclose(loglik, -loss.item() * (ids.shape[1] - 1), rel_tol=1e-5, abs_tol=1e-4)


@pytest.mark.parametrize("method", ["backbone", "knnlm"])
def test_the_other_methods_score_their_own_distribution(run_dir, tasks, method):
    lm = MlpmemLM(run=str(run_dir), method=method, batch_size=2)
    got = scores(lm, tasks)["tiny_ll"]
    backbone, tokenizer = load_backbone(lm.model.config.name_or_path)
    if method == "backbone":
        def forward(ids):
            return F.log_softmax(backbone(input_ids=ids).logits, -1)
    else:
        decoder = build_method("knnlm", run_dir, (backbone, tokenizer)).model

        def forward(ids):
            return decoder(input_ids=ids).logits
    for doc, (loglik, _) in zip(DOCS, got):
        expected = direct_loglikelihood(forward, tokenizer, doc["context"], doc["target"])
        assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)


@pytest.mark.parametrize("share_context", [True, False])
def test_bf16_runs_every_model_call_under_autocast_and_scores_in_fp32(run_dir, tasks, share_context, monkeypatch):
    """``precision=bf16``: the backbone's matmuls run in bf16 on either scoring path, under one autocast held
    around lm-eval's call (its cache of cast weights cleared once, not after every forward); the scores are fp32
    sums close to fp32's (bf16 rounds each logit; the tiny model's log-likelihoods are a few nats)."""
    lm = MlpmemLM(run=str(run_dir), lam=0.4, precision="bf16", batch_size=2, share_context=share_context)
    seen, clears = [], []
    real_clear = torch.clear_autocast_cache
    monkeypatch.setattr(torch, "clear_autocast_cache", lambda: clears.append(len(seen)) or real_clear())
    linear = next(m for m in lm.model.modules() if isinstance(m, torch.nn.Linear))
    handle = linear.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    try:
        got = scores(lm, tasks)["tiny_ll"]
    finally:
        handle.remove()
    assert set(seen) == {torch.bfloat16}
    assert clears == [len(seen)]  # once, after every forward
    exact = scores(MlpmemLM(run=str(run_dir), lam=0.4, batch_size=2, share_context=share_context), tasks)["tiny_ll"]
    assert got != exact  # bf16 was used ...
    for (loglik, _), (want, _) in zip(got, exact):  # ... and rounds, no more
        assert isinstance(loglik, float) and math.isclose(loglik, want, rel_tol=0.05, abs_tol=0.1)


def test_generate_until_is_the_wrappers_greedy_text_cut_at_the_stop(run_dir, tasks, tmp_path):
    lm = MlpmemLM(run=str(run_dir), batch_size=3)
    text = greedy_text(lm.model, lm.tokenizer, DOCS[0]["context"])
    stop = text[3:5]  # a stop string the greedy continuation reaches
    assert stop and len(text) > 5
    generation_task(tmp_path, stop, tasks / "docs.jsonl")
    got = scores(lm, tmp_path, ("tiny_gen",))["tiny_gen"]
    assert got[0] == text[: text.index(stop)]


def test_the_command_and_lm_evals_hf_type_on_a_saved_folder_agree(run_dir, tasks, tmp_path, capsys):
    folder = augmented_from_run(run_dir).save_pretrained(tmp_path / "saved")
    out = tmp_path / "results.json"
    assert main(["lm-eval", "--tasks", "tiny_ll", "--include-path", str(tasks), "--local-only", "--model-args",
                 f"run={run_dir}", "--log-samples", "--output", str(out)]) == 0
    assert "tiny_ll" in capsys.readouterr().out
    ours = sorted(json.loads(out.read_text())["samples"]["tiny_ll"], key=lambda s: s["doc_id"])
    hf = evaluate(["tiny_ll"], "hf", f"pretrained={folder},backend=causal", include_path=tasks, local_only=True,
                  log_samples=True)
    theirs = sorted(hf["samples"]["tiny_ll"], key=lambda s: s["doc_id"])
    for a, b in zip(ours, theirs):
        assert math.isclose(a["resps"][0][0][0], b["resps"][0][0][0], rel_tol=1e-6)


@pytest.mark.parametrize("args, message", [
    (dict(run="r", method="rag"), "unknown method 'rag'"),
    (dict(run="r", lam=1.5), "lam must be in"),
    (dict(run="r", lam="high"), "lam must be"),
    (dict(), "exactly one of run="),
    (dict(run="r", pretrained="p"), "exactly one of run="),
    (dict(run="r", method="backbone", lam=0.2), "not backbone"),
    (dict(run="r", method="knnlm", gate=True), "gate= applies to method=memory, not knnlm"),
    (dict(run="r", gate_offset=2.0), "gate_offset= needs gate=true"),
    (dict(run="r", precision="fp16"), "precision must be one of"),
    (dict(run="r", gate_dir="g"), "gate_dir= needs gate=true"),
    (dict(run="r", gate_floor=0.2), "gate_floor= needs gate=true"),
    (dict(run="r", gate=True, gate_floor=1.0), "gate_floor must be a number in"),
    (dict(run="r", method="knnlm", gate_offset=1.0), "gate_offset= applies to method=memory, not knnlm"),
    (dict(run="r", method="cpt"), "method=cpt needs weights="),
    (dict(run="r", method="rag-dense", weights="w"), "weights= applies to method=cpt or lora, not rag-dense"),
    (dict(run="r", method="backbone", docs="d.jsonl"), "docs= applies to method=rag-dense or rag-bm25, not backbone"),
    (dict(run="r", method="lora", weights="w", top_k=3), "top_k= applies to method=rag-dense or rag-bm25, not lora"),
    (dict(run="r", method="rag-bm25", lam=0.5), "lam= applies to method=memory or knnlm, not rag-bm25"),
    (dict(run="r", method="rag-bm25", top_k=0), "top_k and passage_words must be >= 1"),
    (dict(run="r", method="rag-dense", max_prompt_tokens="many"), "max_prompt_tokens"),
    (dict(pretrained="p", method="cpt", weights="w"), "not method=cpt"),
    (dict(pretrained="p", method="knnlm"), "not method=knnlm"),
])
def test_bad_model_args_are_one_line_errors(args, message):
    with pytest.raises(ConfigError, match=message) as exc:
        MlpmemLM(**args)
    assert "\n" not in str(exc.value)


def test_a_run_without_a_memory_and_an_unknown_task_are_one_line_errors(tmp_path, tasks, capsys):
    assert main(["lm-eval", "--tasks", "tiny_ll", "--include-path", str(tasks), "--local-only", "--model-args",
                 f"run={tmp_path}"]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown task"):
        evaluate(["nope"], model_args=f"run={tmp_path}", include_path=tasks, local_only=True)
