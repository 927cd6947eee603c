"""Memory Mosaics v2 as a transformers model, the matched Transformer, training and in-context recall."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memory_mosaics.config import MosaicsConfig
from memory_mosaics.experiments.config import TrainSection
from memory_mosaics.model import MosaicsForCausalLM
from memory_mosaics.transformer import (
    build_transformer,
    count_parameters,
    document_positions,
    flops_per_token,
    forward_documents,
)
from mlpmem.backbone import decoder_layers, extract_keys, feed_forward


def tiny_config(**kw) -> MosaicsConfig:
    base = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                short_window=4, long_gap_min=2, long_gap_max=4, long_gap_eval=2, scan_chunk=4)
    return MosaicsConfig(**{**base, **kw})


@pytest.fixture()
def tiny_mm():
    torch.manual_seed(0)
    return MosaicsForCausalLM(tiny_config()).eval()


def test_llama_structure_and_key_capture(tiny_mm):
    layers = decoder_layers(tiny_mm)
    assert layers is tiny_mm.model.layers and len(layers) == 2
    assert feed_forward(layers[1]) is tiny_mm.model.layers[1].mlp
    assert tiny_mm.lm_head.weight is tiny_mm.model.embed_tokens.weight
    ids = torch.randint(0, 40, (2, 9))
    keys = extract_keys(tiny_mm, ids, layer=-1, site="ffn_input")
    assert keys.shape == (2, 9, 16)
    residual = extract_keys(tiny_mm, ids, layer=0, site="residual")
    assert residual.shape == (2, 9, 16)


def test_save_and_load_with_safetensors(tiny_mm, tmp_path):
    tiny_mm.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = MosaicsForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.model_type == "memory_mosaics_v2" and loaded.config.short_window == 4
    ids = torch.randint(0, 40, (1, 11))
    assert torch.equal(loaded(ids).logits, tiny_mm(ids).logits)


def test_generate_equals_a_manual_greedy_loop(tiny_mm):
    ids = torch.randint(0, 40, (1, 6))
    out = tiny_mm.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    manual = ids
    for _ in range(5):
        manual = torch.cat([manual, tiny_mm(manual).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, manual)


def test_left_padding_does_not_change_the_real_tokens(tiny_mm):
    ids = torch.randint(1, 40, (1, 7))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], dim=1)
    assert torch.allclose(tiny_mm(padded, attention_mask=mask).logits[:, 3:], tiny_mm(ids).logits, atol=1e-5)


def test_fast_model_equals_reference_model(tiny_mm):
    ids = torch.randint(0, 40, (2, 13))
    doc = torch.tensor([[0] * 6 + [1] * 7, [0] * 13])
    fast = tiny_mm(ids, document_ids=doc).logits
    assert torch.allclose(fast, tiny_mm(ids, document_ids=doc, reference=True).logits, atol=1e-5)


@pytest.mark.parametrize("kind", ["mosaics", "transformer"])
def test_causal_and_document_masked(kind):
    torch.manual_seed(0)
    model = MosaicsForCausalLM(tiny_config()) if kind == "mosaics" else build_transformer(tiny_config())
    model.eval()
    ids = torch.randint(0, 40, (1, 14))
    doc = torch.tensor([[0] * 5 + [1] * 9])
    logits = forward_documents(model, ids, doc).logits
    for j in (0, 3, 8, 13):
        bumped = ids.clone()
        bumped[0, j] = (bumped[0, j] + 7) % 40
        diff = (forward_documents(model, bumped, doc).logits - logits).abs().amax(-1)[0]
        assert (diff[:j] == 0).all() and diff[j] > 0
    # the second document alone gives the same logits as after the first (no attention or retrieval across)
    alone = forward_documents(model, ids[:, 5:], torch.zeros(1, 9, dtype=torch.long)).logits
    assert torch.allclose(alone, logits[:, 5:], atol=1e-5)


def test_document_positions_restart():
    doc = torch.tensor([[3, 3, 4, 4, 4, 5]])
    assert document_positions(doc).tolist() == [[0, 1, 0, 1, 2, 0]]


def test_transformer_is_matched_in_parameters_and_flops_are_reported():
    cfg = tiny_config(vocab_size=4096, hidden_size=128, num_attention_heads=4, num_hidden_layers=4,
                      intermediate_size=344, short_window=64, long_gap_min=16, long_gap_max=64, long_gap_eval=16)
    mm, tf = MosaicsForCausalLM(cfg), build_transformer(cfg)
    assert tf.config.hidden_size == 128 and tf.config.num_hidden_layers == 4 and tf.config.num_attention_heads == 4
    assert abs(count_parameters(mm) - count_parameters(tf)) <= 3 * 128 * 4  # one SwiGLU unit
    f_mm, f_tf = flops_per_token(mm, 256), flops_per_token(tf, 256)
    assert abs(f_mm["matmul"] - f_tf["matmul"]) / f_tf["matmul"] < 0.01
    # context FLOPs: 4 d per pair and layer; the Transformer attends to (T + 1) / 2 keys on average
    assert f_tf["context"] == pytest.approx(4 * 4 * 128 * 257 / 2)
    assert f_mm["context"] > 0 and f_mm["total"] == f_mm["matmul"] + f_mm["context"]


@pytest.mark.parametrize("kind", ["mosaics", "transformer"])
def test_tiny_models_train_on_a_repetitive_sequence(kind, tmp_path):
    from memory_mosaics.experiments.trainer import train_model

    torch.manual_seed(0)
    cfg = tiny_config()
    model = MosaicsForCausalLM(cfg) if kind == "mosaics" else build_transformer(cfg)
    tokens = np.tile(np.arange(1, 9, dtype=np.int32), 100)  # 1 2 ... 8 1 2 ... 8
    docs = np.repeat(np.arange(4, dtype=np.int32), 200)
    streams = {"train": (tokens, docs), "validation": (tokens[:200], docs[:200])}
    train = TrainSection(seq_len=24, batch_size=8, steps=40, lr=1e-2, warmup_fraction=0.1, checkpoint_every=20,
                         eval_every=40, eval_windows=4, threads=1)
    state = train_model(model, streams, train, tmp_path, seed=0, name=kind, progress=False)
    losses = [h["loss"] for h in state["history"]]
    assert np.mean(losses[-5:]) < 0.3 * np.mean(losses[:5])
    assert (tmp_path / "model" / "model.safetensors").is_file() and (tmp_path / "checkpoint").is_dir()


def test_training_resumes_exactly(tmp_path):
    from memory_mosaics.experiments.trainer import train_model

    tokens = np.tile(np.arange(1, 9, dtype=np.int32), 40)
    docs = np.zeros_like(tokens)
    streams = {"train": (tokens, docs), "validation": (tokens[:100], docs[:100])}
    train = TrainSection(seq_len=16, batch_size=4, steps=6, checkpoint_every=3, eval_every=6, eval_windows=2,
                         threads=1)
    torch.manual_seed(0)
    full = MosaicsForCausalLM(tiny_config())
    init = {k: v.clone() for k, v in full.state_dict().items()}
    train_model(full, streams, train, tmp_path / "a", progress=False)
    resumed = MosaicsForCausalLM(tiny_config())
    resumed.load_state_dict(init)
    train_model(resumed, streams, train, tmp_path / "b", progress=False, stop_after=3)
    again = MosaicsForCausalLM(tiny_config())
    again.load_state_dict(init)  # fresh weights: the checkpoint must restore the trained ones
    train_model(again, streams, train, tmp_path / "b", progress=False)
    for key, value in full.state_dict().items():
        assert torch.allclose(value, again.state_dict()[key], atol=1e-6), key


def test_a_tiny_model_recalls_a_pair_planted_earlier_in_context():
    from memory_mosaics.experiments.recall import recall_config, train_recall

    torch.manual_seed(0)
    accuracy = train_recall(MosaicsForCausalLM(recall_config(layers=1)), steps=150)
    assert accuracy > 0.8  # chance is 1/22


def test_a_saved_model_loads_as_a_backbone_by_path(tiny_tokenizer, tmp_path):
    from mlpmem.backbone import fingerprint, load_backbone

    model = MosaicsForCausalLM(tiny_config(vocab_size=len(tiny_tokenizer)))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, tokenizer = load_backbone(str(tmp_path))
    assert isinstance(loaded, MosaicsForCausalLM) and not loaded.training
    assert fingerprint(loaded, tokenizer)["num_layers"] == 2


def test_memory_on_top_config_points_at_the_trained_models(tmp_path):
    from memory_mosaics.experiments.config import MosaicsExperiment
    from memory_mosaics.experiments.memory_on_top import pipeline_config

    exp = MosaicsExperiment(out_dir=str(tmp_path))
    cfg = pipeline_config(exp, "mosaics")
    assert cfg.backbone.name == str(tmp_path / "mosaics" / "model") and cfg.corpus.block_size == exp.train.seq_len
    assert cfg.run_dir == str(tmp_path / "memory-mosaics")
