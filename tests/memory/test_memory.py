"""MLPMemory: shapes, config validation, backbone init, tied head, checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny import VOCAB, TinyTokenizer, memory_config_for, tiny_backbone
from mlpmem.backbone import decoder_layers, extract_keys, feed_forward
from mlpmem.errors import ConfigError, CorruptArtifact, FingerprintMismatch
from mlpmem.memory import MemoryConfig, MLPMemory, init_from_backbone, tie_to_backbone

FAMILIES = ("llama", "gpt2")


def memory_for(backbone, preset: str = "tiny", tokenizer=None, key_layer=-1, key_site="ffn_input",
               **overrides) -> MLPMemory:
    torch.manual_seed(1)
    return MLPMemory(memory_config_for(backbone, preset, key_layer, key_site, tokenizer, **overrides))


def sized(preset: str = "tiny", **options) -> MemoryConfig:
    return MemoryConfig(preset=preset, **{"input_size": 32, "vocab_size": VOCAB, "intermediate_size": 64,
                                          "tie_head": False, **options})


@pytest.mark.parametrize("family", FAMILIES)
def test_shapes_and_features(family):
    backbone = tiny_backbone(family)
    memory = memory_for(backbone)
    keys = torch.randn(2, 5, 32)
    assert memory(keys).shape == (2, 5, VOCAB)
    assert memory(keys[0, 0]).shape == (VOCAB,)
    feats = memory.features(keys)
    assert feats.shape == (2, 5, 32)
    torch.testing.assert_close(memory.head(feats), memory(keys))
    assert isinstance(memory.in_proj, torch.nn.Identity)
    wide = memory_for(backbone, hidden_size=48)
    assert wide(keys).shape == (2, 5, VOCAB) and wide.in_proj.weight.shape == (48, 32)


def test_presets_and_config_round_trip():
    depths = {name: sized(name).depth for name in ("tiny", "small", "base", "large")}
    assert depths == {"tiny": 2, "small": 4, "base": 8, "large": 15}
    config = sized("small", mlp="plain", activation="gelu_tanh", norm="layernorm", norm_eps=1e-4, key_layer=1,
                   key_site="residual")
    assert config.intermediate_size == 64 and config.width == 32 and config.activation == "gelu_tanh"
    assert MemoryConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.parametrize(
    "bad",
    [
        dict(num_layers=0), dict(mlp="moe"), dict(norm="batchnorm"), dict(norm_eps=0.0), dict(tie_head="yes"),
        dict(init="zeros"),
        dict(key_site="attn"), dict(key_layer=-1), dict(hidden_size=True), dict(activation="tanh"),
        dict(backbone={"vocab_size": 99, "hidden_size": 32}),
    ],
)
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        sized(**bad)


def test_config_rejects_unknown_preset_and_keys():
    with pytest.raises(ConfigError, match="preset"):
        sized("huge")
    with pytest.raises(ConfigError, match="unknown"):
        MemoryConfig.from_dict({"input_size": 32, "vocab_size": VOCAB, "intermediate_size": 64, "depth": 3})


@pytest.mark.parametrize("family", FAMILIES)
def test_init_from_backbone_copies_mlp_and_norm(family):
    backbone = tiny_backbone(family)
    memory = memory_for(backbone, num_layers=2, init="backbone")
    assert init_from_backbone(memory, backbone, start_layer=0) == [0, 1]
    x = torch.randn(3, 4, 32)
    for block, layer in zip(memory.blocks, decoder_layers(backbone)):
        with torch.no_grad():
            torch.testing.assert_close(block.mlp(x), feed_forward(layer)(x))
            src_norm = layer.post_attention_layernorm if family == "llama" else layer.ln_2
            torch.testing.assert_close(block.norm(x), src_norm(x))
    assert torch.equal(memory.head.weight, backbone.get_output_embeddings().weight)
    assert memory.head.weight.data_ptr() != backbone.get_output_embeddings().weight.data_ptr()  # a copy
    assert memory.config.init == "backbone"


def test_init_window_shifts_and_cycles():
    backbone = tiny_backbone("llama")
    mirror = dict(init="backbone", key_layer=0)
    assert init_from_backbone(memory_for(backbone, num_layers=2, **mirror), backbone, start_layer=1) == [0, 1]
    assert init_from_backbone(memory_for(backbone, num_layers=1, **mirror), backbone, start_layer=-1) == [1]
    assert init_from_backbone(memory_for(backbone, num_layers=5, **mirror), backbone, start_layer=1) == [1, 0, 1, 0, 1]


def test_init_from_backbone_rejects_other_family_or_widths():
    llama, gpt2 = tiny_backbone("llama"), tiny_backbone("gpt2")
    with pytest.raises(ConfigError, match="family|gpt2"):
        init_from_backbone(memory_for(llama, init="backbone"), gpt2, 0)
    with pytest.raises(ConfigError, match="widths"):
        init_from_backbone(memory_for(llama, intermediate_size=96), llama, 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_tied_head_shares_frozen_backbone_embedding(family):
    backbone = tiny_backbone(family)
    memory = memory_for(backbone, tie_head=True)
    with pytest.raises(ConfigError, match="tie_to_backbone"):
        memory(torch.randn(32))
    tie_to_backbone(memory, backbone)
    assert memory.head.weight is backbone.get_output_embeddings().weight
    assert not memory.head.weight.requires_grad
    untied = memory.num_parameters() - memory.num_parameters(trainable_only=True)
    assert untied == VOCAB * 32
    assert memory(torch.randn(32)).shape == (VOCAB,)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_save_load_round_trip_is_exact(tmp_path, family, tied):
    backbone, tokenizer = tiny_backbone(family), TinyTokenizer()
    memory = memory_for(backbone, tokenizer=tokenizer, tie_head=tied)
    if tied:
        tie_to_backbone(memory, backbone)
    with torch.no_grad():
        for p in memory.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)  # not the init values
    memory.save_pretrained(tmp_path / "mem")
    memory.save_pretrained(tmp_path / "mem")  # overwriting a previous save is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem"]  # no temporary folders left behind
    loaded = MLPMemory.from_pretrained(tmp_path / "mem", backbone, tokenizer)
    keys = torch.randn(4, 32)
    assert torch.equal(loaded(keys), memory(keys))
    assert loaded.config == memory.config
    from safetensors import safe_open

    with safe_open(str(tmp_path / "mem" / "model.safetensors"), "pt") as handle:
        assert ("head.weight" in handle.keys()) == (not tied)
    if tied:
        assert loaded.head.weight is backbone.get_output_embeddings().weight
        with pytest.raises(ConfigError, match="backbone_model"):
            MLPMemory.from_pretrained(tmp_path / "mem")


def test_loading_next_to_a_different_backbone_raises(tmp_path):
    backbone, tokenizer = tiny_backbone("llama"), TinyTokenizer()
    memory_for(backbone, tokenizer=tokenizer).save_pretrained(tmp_path / "mem")
    with pytest.raises(FingerprintMismatch, match="weights_sha") as info:
        MLPMemory.from_pretrained(tmp_path / "mem", tiny_backbone("llama", seed=7), tokenizer)
    assert "\n" not in str(info.value)
    with pytest.raises(FingerprintMismatch, match="tokenizer_sha"):
        MLPMemory.from_pretrained(tmp_path / "mem", backbone, TinyTokenizer(salt="other-"))
    MLPMemory.from_pretrained(tmp_path / "mem", backbone)  # no tokenizer: only the model part is checked


def test_corrupt_or_missing_files_raise_corrupt_artifact(tmp_path):
    backbone = tiny_backbone("gpt2")
    memory_for(backbone).save_pretrained(tmp_path / "mem")
    weights = tmp_path / "mem" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(CorruptArtifact, match="model.safetensors") as info:
        MLPMemory.from_pretrained(tmp_path / "mem")
    assert "\n" not in str(info.value)
    weights.write_bytes(b"\xff" * 64)  # garbage header
    with pytest.raises(CorruptArtifact, match="model.safetensors"):
        MLPMemory.from_pretrained(tmp_path / "mem")
    weights.unlink()
    with pytest.raises(CorruptArtifact, match="model.safetensors"):
        MLPMemory.from_pretrained(tmp_path / "mem")
    (tmp_path / "mem" / "config.json").write_text("{not json")
    with pytest.raises(CorruptArtifact, match="config.json"):
        MLPMemory.from_pretrained(tmp_path / "mem")
    with pytest.raises(CorruptArtifact, match="config.json"):
        MLPMemory.from_pretrained(tmp_path / "nowhere")


def test_weights_of_another_shape_raise_corrupt_artifact(tmp_path):
    backbone = tiny_backbone("llama")
    memory_for(backbone, num_layers=2).save_pretrained(tmp_path / "a")
    memory_for(backbone, num_layers=3).save_pretrained(tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").replace(tmp_path / "a" / "model.safetensors")
    with pytest.raises(CorruptArtifact, match="missing|unexpected"):
        MLPMemory.from_pretrained(tmp_path / "a")


def test_save_refuses_to_replace_a_folder_with_other_files(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="other files"):
        memory_for(tiny_backbone("llama")).save_pretrained(tmp_path / "run")
    assert (tmp_path / "run" / "notes.txt").read_text() == "keep me"


def test_learns_a_repetitive_sequence_better_than_the_backbone():
    """A real learning test: a tiny memory beats the (random) backbone's perplexity on its keys."""
    backbone = tiny_backbone("llama")
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(1, VOCAB, (11,), generator=g)
    tokens = pattern.repeat(12)[None]  # (1, 132)
    with torch.no_grad():
        keys = extract_keys(backbone, tokens, layer=-1)[0, :-1]  # (T - 1, d)
        lm_logits = backbone(input_ids=tokens).logits[0, :-1]  # (T - 1, V)
    targets = tokens[0, 1:]  # (T - 1,)
    lm_ppl = F.cross_entropy(lm_logits, targets).exp().item()

    from mlpmem.training.loss import sparse_hybrid_loss

    teacher_ids = torch.stack([targets, (targets + 1) % VOCAB], -1)  # a sharp kNN-like teacher
    teacher_probs = torch.tensor([0.9, 0.05]).expand(len(targets), 2)
    residual = torch.full((len(targets),), 0.05)
    torch.manual_seed(0)
    memory = MLPMemory(memory_config_for(backbone, "tiny"))
    opt = torch.optim.Adam(memory.parameters(), lr=1e-2)
    for _ in range(100):
        loss, _ = sparse_hybrid_loss(memory(keys), teacher_ids, teacher_probs, residual, targets, alpha=0.5)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        mem_ppl = F.cross_entropy(memory(keys), targets).exp().item()
    assert mem_ppl < 2.0 and mem_ppl < lm_ppl / 10, (mem_ppl, lm_ppl)


@pytest.mark.parametrize("tied", [False, True])
def test_cast_weights_to_bf16_keeps_a_tied_head_and_stays_close(tied):
    backbone = tiny_backbone("llama")
    memory = memory_for(backbone, tie_head=tied)
    if tied:
        tie_to_backbone(memory, backbone)
    keys = torch.randn(5, 32)
    with torch.no_grad():
        expected = torch.log_softmax(memory(keys), -1)
        memory.cast_weights(torch.bfloat16)
        got = torch.log_softmax(memory(keys).float(), -1)
    assert memory.blocks[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert memory.head.weight.dtype == (torch.float32 if tied else torch.bfloat16)
    if tied:
        assert memory.head.weight is backbone.get_output_embeddings().weight
    assert backbone.get_output_embeddings().weight.dtype == torch.float32  # the backbone is never cast
    torch.testing.assert_close(got, expected, rtol=0, atol=0.05)  # bf16 keeps ~3 significant digits
