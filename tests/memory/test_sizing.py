"""What a memory reads from its backbone: sizes, the mirrored blocks of init backbone, output scaling."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers as T

from helpers.tiny import VOCAB, tiny_backbone
from mlpmem.errors import ConfigError
from mlpmem.memory import MemoryConfig, MLPMemory, size_for_backbone
from mlpmem.memory.sizing import ffn_width, unhonoured_scaling


def tiny_gemma2(softcap: float | None = 30.0) -> T.PreTrainedModel:
    torch.manual_seed(0)
    config = T.Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, pad_token_id=0,
                            final_logit_softcapping=softcap)
    return T.Gemma2ForCausalLM(config).eval()


def test_a_random_memory_is_its_own_whatever_the_family():
    for backbone in (tiny_backbone("gpt2"), tiny_gemma2()):
        config = size_for_backbone(MemoryConfig(tie_head=False), backbone)
        assert (config.mlp, config.activation, config.norm, config.norm_eps) == ("gated", "silu", "rmsnorm", 1e-5)
        assert (config.input_size, config.vocab_size, config.num_layers, config.hidden_size) == (32, VOCAB, 2, 32)


def test_init_backbone_takes_the_backbones_blocks():
    gpt2 = tiny_backbone("gpt2")
    mirror = size_for_backbone(MemoryConfig(init="backbone", tie_head=False), gpt2)
    assert (mirror.mlp, mirror.activation, mirror.norm, mirror.intermediate_size) == ("plain", "gelu_tanh",
                                                                                       "layernorm", 128)


def test_a_family_that_cannot_be_mirrored_is_one_line_naming_it_and_the_option_that_works():
    with pytest.raises(ConfigError, match=r"init=backbone cannot mirror a gemma2 backbone.*memory.init: random") as exc:
        size_for_backbone(MemoryConfig(init="backbone", tie_head=False), tiny_gemma2())
    assert "\n" not in str(exc.value)


def test_an_output_scaling_not_applied_to_the_memory_is_said_once_when_the_head_is_the_backbones():
    assert unhonoured_scaling(tiny_gemma2(None)) == [] and unhonoured_scaling(tiny_backbone("llama")) == []
    with pytest.warns(UserWarning, match="gemma2 backbone's final_logit_softcapping=30.0"):
        size_for_backbone(MemoryConfig(tie_head=True), tiny_gemma2())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        size_for_backbone(MemoryConfig(tie_head=False), tiny_gemma2())  # its own head: nothing is lost


def test_widths_default_to_the_backbones_feed_forward_or_four_times_the_key():
    assert ffn_width(tiny_backbone("llama"), 32) == 64
    assert ffn_width(tiny_backbone("gpt2"), 32) == 128  # n_inner unset: GPT-2's own 4 × d
    config = size_for_backbone(MemoryConfig(intermediate_size=40, hidden_size=48, tie_head=False),
                               tiny_backbone("llama"))
    assert (config.intermediate_size, config.hidden_size) == (40, 48)


def test_an_unsized_config_is_refused_by_the_memory():
    with pytest.raises(ConfigError, match="size it for its backbone"):
        MLPMemory(MemoryConfig())
