import pytest
import torch

from helpers.tiny import tiny_backbone
from mlpmem.backbone import (
    KeyHook,
    check_fingerprint,
    decoder_layers,
    extract_keys,
    fingerprint,
    load_backbone,
    output_logits,
    resolve_layer,
)
from mlpmem.compute import model_device
from mlpmem.errors import ConfigError, FingerprintMismatch, MlpmemError


def _ids(vocab, b=2, t=20):
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, vocab, (b, t), generator=g)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("layer", [0, 1, -1])
def test_ffn_input_key_equals_hand_computation(family, layer, tiny_tokenizer):
    model = tiny_backbone(family, vocab_size=len(tiny_tokenizer), preset="bpe")
    ids = _ids(len(tiny_tokenizer))
    idx = resolve_layer(model, layer)
    out = model(ids, output_hidden_states=True)
    block = decoder_layers(model)[idx]
    h_in = out.hidden_states[idx]  # residual stream entering block idx, (B, T, d)
    # recompute the input of the block's feed-forward by hand: h + attn(norm1(h)), then norm2
    with KeyHook(model, layer, "residual") as hook:
        model(ids)
    if family == "llama":
        norm1, norm2 = block.input_layernorm, block.post_attention_layernorm
        pos = torch.arange(ids.shape[1])[None]
        rope = model.model.rotary_emb(h_in, pos)
        attn = block.self_attn(norm1(h_in), position_embeddings=rope, attention_mask=None)[0]
    else:
        norm1, norm2 = block.ln_1, block.ln_2
        attn = block.attn(norm1(h_in))[0]
    expected = norm2(h_in + attn)
    with KeyHook(model, layer, "ffn_input") as hook2:
        model(ids)
    torch.testing.assert_close(hook2.keys, expected, rtol=1e-4, atol=1e-5)
    # the residual site is the block output = the next hidden state (the last one is pre final-norm)
    if idx < len(decoder_layers(model)) - 1:
        torch.testing.assert_close(hook.keys, out.hidden_states[idx + 1])


@pytest.mark.parametrize("site", ["ffn_input", "residual"])
def test_truncated_forward_gives_same_keys_and_skips_upper_layers(site, tiny_llama, tiny_tokenizer):
    ids = _ids(len(tiny_tokenizer))
    with KeyHook(tiny_llama, 1, site) as hook:
        tiny_llama(ids)
    calls = []
    handle = decoder_layers(tiny_llama)[2].register_forward_hook(lambda *a: calls.append(1))
    keys = extract_keys(tiny_llama, ids, layer=1, site=site)
    handle.remove()
    assert torch.equal(keys, hook.keys)
    assert calls == []  # layer 2 never ran


def test_resolve_layer_fraction_and_errors(tiny_llama):
    assert resolve_layer(tiny_llama, 1.0) == 2
    assert resolve_layer(tiny_llama, 0.7) == 1
    assert resolve_layer(tiny_llama, -1) == 2
    with pytest.raises(ConfigError):
        resolve_layer(tiny_llama, 3)
    with pytest.raises(ConfigError):
        resolve_layer(tiny_llama, 1.5)
    with pytest.raises(ConfigError):
        KeyHook(tiny_llama, 0, "attention")


def test_fingerprint_mismatch(tiny_tokenizer):
    a = fingerprint(tiny_backbone("llama", seed=0, vocab_size=len(tiny_tokenizer), preset="bpe"), tiny_tokenizer)
    b = fingerprint(tiny_backbone("llama", seed=1, vocab_size=len(tiny_tokenizer), preset="bpe"), tiny_tokenizer)
    check_fingerprint(a, dict(a, name="other"), "x")  # the name alone is informative
    with pytest.raises(FingerprintMismatch, match="weights_sha"):
        check_fingerprint(a, b, "datastore")


def test_load_local_folder_and_missing(tiny_backbone_dir, tmp_path):
    model, tok = load_backbone(str(tiny_backbone_dir))
    assert not model.training and len(decoder_layers(model)) == 3
    with pytest.raises(MlpmemError, match="cannot load backbone"):
        load_backbone(str(tmp_path / "nope"))


def test_a_model_type_transformers_does_not_know_is_a_one_line_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "nobody_registered_this"}')
    with pytest.raises(MlpmemError, match="model type 'nobody_registered_this' .* is unknown to transformers: "
                                          "import the package that registers it") as exc:
        load_backbone(str(tmp_path))
    assert "\n" not in str(exc.value)
    (tmp_path / "config.json").write_text("[1, 2")
    with pytest.raises(MlpmemError, match="not a JSON object"):
        load_backbone(str(tmp_path))


def test_inputs_on_the_cpu_reach_a_model_wherever_it_is(tiny_llama):
    assert model_device(tiny_llama) == torch.device("cpu")
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU
    keys = extract_keys(tiny_llama, _ids(tiny_llama.config.vocab_size).to(torch.int32).long(), layer=-1)
    assert keys.device == model_device(tiny_llama)


def test_the_lm_head_runs_in_fp32_inside_autocast_too():
    model = tiny_backbone()
    hidden = torch.randn(3, model.config.hidden_size)
    exact = output_logits(model, hidden)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        held = output_logits(model, hidden)
    assert held.dtype == torch.float32 and torch.equal(held, exact)
