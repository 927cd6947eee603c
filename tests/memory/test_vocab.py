"""The corpus-vocabulary head: which tokens it scores, the full-vocabulary view, mixing, training, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.tiny import VOCAB, memory_config_for, tiny_backbone
from mlpmem.errors import ConfigError
from mlpmem.inference.mixing import mix
from mlpmem.memory import MemoryConfig, MLPMemory, tie_to_backbone
from mlpmem.memory.vocab import corpus_vocabulary, covered_perplexity, index_of, to_head_ids
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData, evaluate
from mlpmem.training.loop import batch_loss
from mlpmem.training.loss import sparse_hybrid_loss

IDS = torch.tensor([1, 4, 5, 9, 17, 30, 31, 50], dtype=torch.int64)


def corpus_memory(backbone, tied: bool, ids: torch.Tensor = IDS) -> MLPMemory:
    torch.manual_seed(2)
    config = memory_config_for(backbone, "tiny", tie_head=tied, head_vocab_size=len(ids))
    memory = MLPMemory(config)
    memory.set_head_vocab(ids)
    return tie_to_backbone(memory, backbone) if tied else memory


def test_corpus_vocabulary_is_sorted_unique_and_ignores_pads():
    vocab = corpus_vocabulary([np.array([5, 3, 5]), np.array([[9, -1], [3, -1]])], vocab_size=10)
    assert vocab.tolist() == [3, 5, 9] and vocab.dtype == np.int64
    index = index_of(vocab, 10)
    assert index[[3, 5, 9, 0]].tolist() == [0, 1, 2, -1]
    assert to_head_ids(np.array([[9, -1], [3, 5]]), index, "x").tolist() == [[2, -1], [0, 1]]
    with pytest.raises(ConfigError, match="outside the memory's corpus vocabulary"):
        to_head_ids(np.array([4]), index, "the teacher")
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        corpus_vocabulary([np.array([10])], vocab_size=10)
    with pytest.raises(ConfigError, match="empty"):
        corpus_vocabulary([np.array([-1])], vocab_size=10)


@pytest.mark.parametrize("bad", [torch.tensor([3, 3]), torch.tensor([5, 2]), torch.tensor([0, VOCAB]),
                                 torch.tensor([1.0, 2.0])])
def test_set_head_vocab_refuses_bad_ids(bad):
    memory = MLPMemory(MemoryConfig(input_size=32, vocab_size=VOCAB, intermediate_size=64, tie_head=False,
                                    head_vocab_size=2))
    with pytest.raises(ConfigError):
        memory.set_head_vocab(bad)
    with pytest.raises(ConfigError, match="for a head of 2"):
        memory.set_head_vocab(torch.tensor([1, 2, 3]))
    with pytest.raises(ConfigError, match="full-vocabulary"):
        full = MemoryConfig(input_size=32, vocab_size=VOCAB, intermediate_size=64, tie_head=False)
        MLPMemory(full).set_head_vocab(torch.tensor([1]))
    with pytest.raises(ConfigError, match="head_vocab_size"):
        MemoryConfig(input_size=32, vocab_size=VOCAB, intermediate_size=64, head_vocab_size=VOCAB + 1)


@pytest.mark.parametrize("tied", [True, False])
def test_full_view_is_minus_inf_outside_and_a_distribution(tied):
    backbone = tiny_backbone()
    memory = corpus_memory(backbone, tied)
    keys = torch.randn(3, 32)
    logits = memory(keys)  # (3, V)
    assert logits.shape == (3, VOCAB) and memory.head.weight.shape == (len(IDS), 32)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[IDS] = False
    assert torch.isneginf(logits[:, outside]).all() and torch.isfinite(logits[:, IDS]).all()
    torch.testing.assert_close(torch.softmax(logits, -1).sum(-1), torch.ones(3))
    if tied:  # the head's rows are the backbone embedding's rows for its tokens, frozen
        emb = backbone.get_output_embeddings().weight
        torch.testing.assert_close(memory.head.weight, emb[IDS].detach())
        assert not memory.head.weight.requires_grad
        full = MLPMemory(memory_config_for(backbone, "tiny", tie_head=True))
        full.load_state_dict({k: v for k, v in memory.state_dict().items() if k not in ("vocab_ids", "head.weight")},
                             strict=False)
        tie_to_backbone(full, backbone)
        torch.testing.assert_close(logits[:, IDS], full(keys)[:, IDS])  # same logits on the covered tokens


def test_mixing_identities_hold_with_a_corpus_head():
    backbone = tiny_backbone()
    memory = corpus_memory(backbone, tied=True)
    keys, lm = torch.randn(4, 32), torch.randn(4, VOCAB)
    mem = memory(keys)
    assert torch.equal(mix(lm, mem, 0.0), torch.log_softmax(lm, -1))
    assert torch.equal(mix(lm, mem, 1.0), torch.log_softmax(mem, -1))
    mixed = mix(lm, mem, 0.3)
    assert torch.isfinite(mixed).all()  # an uncovered token keeps (1 - lam) p_lm
    torch.testing.assert_close(mixed.exp().sum(-1), torch.ones(4))
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[IDS] = False
    torch.testing.assert_close(mixed[:, outside].exp(), 0.7 * torch.softmax(lm, -1)[:, outside])


@pytest.mark.parametrize("tied", [True, False])
def test_save_load_round_trip_keeps_the_vocabulary(tmp_path, tied):
    backbone = tiny_backbone()
    memory = corpus_memory(backbone, tied)
    memory.save_pretrained(tmp_path / "mem")
    loaded = MLPMemory.from_pretrained(tmp_path / "mem", backbone_model=backbone)
    assert torch.equal(loaded.vocab_ids, IDS) and loaded.config.head_vocab_size == len(IDS)
    keys = torch.randn(2, 32)
    assert torch.equal(loaded(keys), memory(keys))


def _batch(n: int = 6, k: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ids = rng.choice(IDS.numpy(), size=(n, k))
    ids[:, -1] = -1  # a pad
    probs = np.where(ids >= 0, 0.25, 0.0)
    targets = rng.choice(IDS.numpy(), size=n)
    return {"keys": rng.standard_normal((n, 32)).astype(np.float16), "targets": targets.astype(np.int32),
            "ids": ids.astype(np.int32), "probs": probs.astype(np.float16),
            "residual": (1 - probs.sum(1)).astype(np.float32)}


@pytest.mark.parametrize("fused", [True, False])
def test_loss_in_head_space_equals_the_full_view_loss(fused):
    """Training on head rows (remapped ids) is the full-vocabulary loss of the -inf padded logits."""
    backbone = tiny_backbone()
    memory = corpus_memory(backbone, tied=False)
    b = _batch()
    data = TrainData(b["keys"], b["targets"], b["ids"], b["probs"], b["residual"], index_of(IDS.numpy(), VOCAB))
    batch = data.batch(np.arange(len(b["targets"])))
    cfg = TrainConfig(precision="fp32", alpha=0.6)
    loss, _ = batch_loss(memory, memory, batch, cfg, fused=fused)
    full = TrainData(b["keys"], b["targets"], b["ids"], b["probs"], b["residual"]).batch(np.arange(6))
    ref, _ = sparse_hybrid_loss(memory(full["keys"]), full["teacher_ids"], full["teacher_probs"],
                                full["teacher_residual"], full["targets"], 0.6)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    assert torch.isfinite(memory.head.weight.grad).all()


def test_validation_reports_coverage_and_covered_perplexity():
    backbone = tiny_backbone()
    memory = corpus_memory(backbone, tied=True).eval()
    targets = np.array([1, 4, 2, 9])  # token 2 is not covered
    data = EvalData(np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32), targets,
                    np.full(4, -2.0))
    metrics = evaluate(memory, data, [0.0, 0.5, 1.0])
    assert metrics["memory_coverage"] == 0.75 and math.isfinite(metrics["memory_ppl"])
    assert math.isfinite(metrics["ppl_by_lambda"]["0.5"]) and metrics["ppl_by_lambda"]["1.0"] == math.inf
    assert metrics["best_lambda"] < 1.0
    assert covered_perplexity(np.array([-1.0, -math.inf])) == (math.e, 0.5)
