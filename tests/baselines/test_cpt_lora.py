"""CPT and LoRA baselines: the LoRA rank rule matches parameter counts; both train end to end on a tiny model."""

import copy

import pytest
import torch

from helpers.corpus import corpus_text
from helpers.tiny import tiny_backbone
from mlpmem.baselines.cpt import FinetuneConfig, pack_blocks, train_cpt
from mlpmem.baselines.lora import (
    LoRAConfig,
    add_lora,
    default_targets,
    lora_rank_for,
    params_per_rank,
    train_lora,
)
from mlpmem.errors import ConfigError


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("target", [1, 5000, 20000])
def test_lora_rank_rule_matches_parameter_count(family, target):
    model = tiny_backbone(family, vocab_size=160, preset="bpe")
    targets = default_targets(model)
    per_rank = params_per_rank(model, targets)
    rank = lora_rank_for(model, target)
    peft_model = add_lora(copy.deepcopy(model), rank)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == rank * per_rank  # r * Σ (in + out) over the adapted projections
    best = min(range(1, 200), key=lambda r: abs(r * per_rank - target))
    assert rank == best


def test_llama_targets_and_per_rank_by_hand():
    # hidden 32, intermediate 64, 4 heads, 2 kv heads (kv dim 16), 3 layers
    model = tiny_backbone("llama", vocab_size=160, preset="bpe")
    assert default_targets(model) == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    per_layer = (32 + 32) + (32 + 16) + (32 + 16) + (32 + 32) + 3 * (32 + 64)
    assert params_per_rank(model, default_targets(model)) == 3 * per_layer
    with pytest.raises(ConfigError):
        params_per_rank(model, ["no_such_proj"])


def test_pack_blocks_pads_the_tail():
    import numpy as np

    blocks = pack_blocks([np.arange(5), np.arange(4)], 4)
    assert blocks.tolist() == [[0, 1, 2, 3], [4, 0, 1, 2], [3, -100, -100, -100]]


def _loss(model, tokenizer, text):
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return model(input_ids=ids, labels=ids).loss.item()


def test_cpt_trains_every_parameter_and_lowers_the_loss(tiny_tokenizer):
    model = tiny_backbone("llama", vocab_size=len(tiny_tokenizer), preset="bpe")
    docs = corpus_text(6)
    before = _loss(model, tiny_tokenizer, docs[0])
    stats = train_cpt(model, tiny_tokenizer, docs, FinetuneConfig(epochs=3, lr=3e-3, batch_size=2, block_size=32),
                      progress=False)
    assert _loss(model, tiny_tokenizer, docs[0]) < before
    assert stats["trainable_parameters"] == sum(p.numel() for p in model.parameters())
    assert stats["last_loss"] < stats["first_loss"] and not any(p.requires_grad for p in model.parameters())


def test_lora_trains_only_adapters_and_merges(tiny_tokenizer):
    model = tiny_backbone("llama", vocab_size=len(tiny_tokenizer), preset="bpe")
    original = copy.deepcopy(model)
    docs = corpus_text(6)
    cfg = LoRAConfig(finetune=FinetuneConfig(epochs=3, lr=1e-2, batch_size=2, block_size=32))
    merged, stats = train_lora(copy.deepcopy(model), tiny_tokenizer, docs, target_parameters=3000, cfg=cfg,
                               progress=False)
    assert stats["rank"] == lora_rank_for(model, 3000)
    assert stats["trainable_parameters"] == stats["rank"] * params_per_rank(model, default_targets(model))
    assert _loss(merged, tiny_tokenizer, docs[0]) < _loss(original, tiny_tokenizer, docs[0])
    assert type(merged).__name__ == "LlamaForCausalLM"  # adapters merged away
    emb = dict(merged.named_parameters())["model.embed_tokens.weight"]
    assert torch.equal(emb, dict(original.named_parameters())["model.embed_tokens.weight"])  # frozen


def test_finetune_config_validation():
    with pytest.raises(ConfigError):
        FinetuneConfig(epochs=0)
    with pytest.raises(ConfigError):
        LoRAConfig(alpha_over_rank=0)
