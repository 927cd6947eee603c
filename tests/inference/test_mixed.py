"""MemoryAugmentedForCausalLM: exact endpoints, one-pass hooks, and stock generate on the mixed distribution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny import PAD, VOCAB, TinyTokenizer, left_padded, memory_config_for, tiny_backbone
from mlpmem.backbone import KeyHook, decoder_layers
from mlpmem.errors import ConfigError, FingerprintMismatch
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import mix
from mlpmem.memory import MLPMemory

FAMILIES = ("llama", "gpt2")
PROMPTS = [[5, 17, 3, 99, 42, 7], [8, 9], [60, 61, 62, 63]]


def augmented(family: str, lam: float = 0.5, site: str = "ffn_input", tokenizer=None) -> MemoryAugmentedForCausalLM:
    """A tiny backbone with a random memory whose logits are spread enough to change the greedy path."""
    backbone = tiny_backbone(family)
    torch.manual_seed(3)
    config = memory_config_for(backbone, "tiny", key_layer=-1, key_site=site, tokenizer=tokenizer)
    memory = MLPMemory(config).eval()
    with torch.no_grad():
        memory.head.weight.mul_(100.0)
    return MemoryAugmentedForCausalLM.from_parts(backbone, memory, lam=lam, tokenizer=tokenizer)


def ids_of(prompt: list[int]) -> torch.Tensor:
    return torch.tensor([prompt])


def hand_keys(backbone, input_ids, layer: int, site: str) -> torch.Tensor:
    with KeyHook(backbone, layer, site) as hook, torch.no_grad():
        backbone(input_ids=input_ids)
    return hook.keys


@pytest.mark.parametrize("family", FAMILIES)
def test_lambda_zero_is_exactly_the_backbone(family):
    mlm = augmented(family, lam=0.0)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        expected = F.log_softmax(mlm.backbone(input_ids=x).logits, -1)
        assert torch.equal(mlm(input_ids=x).logits, expected)


@pytest.mark.parametrize("site", ["ffn_input", "residual"])
@pytest.mark.parametrize("family", FAMILIES)
def test_lambda_one_is_exactly_the_memory(family, site):
    mlm = augmented(family, lam=1.0, site=site)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        keys = hand_keys(mlm.backbone, x, mlm.key_layer, site)  # (1, T, d)
        expected = F.log_softmax(mlm.memory(keys), -1)
        got = mlm(input_ids=x).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_mixture_is_normalised_and_between_the_two(family):
    mlm = augmented(family, lam=0.3)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        mixed = mlm(input_ids=x).logits
        p_lm = F.softmax(mlm.backbone(input_ids=x).logits, -1)
        p_mem = F.softmax(mlm.memory(hand_keys(mlm.backbone, x, mlm.key_layer, "ffn_input")), -1)
    torch.testing.assert_close(torch.logsumexp(mixed, -1), torch.zeros(1, len(PROMPTS[0])), atol=1e-5, rtol=0)
    torch.testing.assert_close(mixed.exp(), 0.7 * p_lm + 0.3 * p_mem, atol=1e-6, rtol=1e-5)


def test_one_backbone_pass_and_logits_to_keep():
    mlm = augmented("llama", lam=0.5)
    calls = []
    handle = decoder_layers(mlm.backbone)[0].register_forward_hook(lambda *a: calls.append(1))
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        full = mlm(input_ids=x).logits
        last = mlm(input_ids=x, logits_to_keep=1).logits
    handle.remove()
    assert calls == [1, 1]
    assert last.shape == (1, 1, VOCAB)
    torch.testing.assert_close(last, full[:, -1:])


def test_generate_runs_the_memory_on_kept_positions_only():
    mlm = augmented("llama", lam=0.5)
    shapes = []
    handle = mlm.memory.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    ids, mask = left_padded(PROMPTS)
    greedy(mlm, ids, mask, max_new_tokens=4)
    handle.remove()
    assert shapes == [(3, 1, 32)] * 4  # prefill keeps 1 position (logits_to_keep=1), then 1 per step


def test_labels_loss_is_on_the_mixed_distribution():
    mlm = augmented("gpt2", lam=0.5)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        out = mlm(input_ids=x, labels=x)
        nll = F.nll_loss(out.logits[0, :-1], x[0, 1:])
        as_tuple = mlm(input_ids=x, labels=x, return_dict=False)
    torch.testing.assert_close(out.loss, nll)
    torch.testing.assert_close(as_tuple[0], nll)
    assert torch.equal(as_tuple[1], out.logits)


def test_hooks_are_removed_and_reentrant():
    mlm = augmented("llama", lam=1.0)
    x = ids_of(PROMPTS[1])
    with mlm.active(), mlm.active(), torch.no_grad():  # nested: mixed once, not twice
        inside = mlm.backbone(input_ids=x).logits
        assert torch.equal(mlm(input_ids=x).logits, inside)
    with torch.no_grad():
        raw = mlm.backbone(input_ids=x).logits  # hooks gone: plain backbone logits again
    assert not torch.allclose(raw, inside)
    assert not mlm.backbone._forward_hooks and not mlm.backbone._forward_hooks_with_kwargs


def greedy(model, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": PAD, **kwargs}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    return model.generate(input_ids=input_ids, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_lambda_zero_matches_backbone_batched_left_padded(family):
    mlm = augmented(family, lam=0.0)
    ids, mask = left_padded(PROMPTS)
    expected = greedy(mlm.backbone, ids, mask)
    assert torch.equal(greedy(mlm, ids, mask), expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_mixed_cache_and_batching_are_consistent(family):
    mlm = augmented(family, lam=0.5)
    ids, mask = left_padded(PROMPTS)
    cached = greedy(mlm, ids, mask, use_cache=True)
    assert torch.equal(cached, greedy(mlm, ids, mask, use_cache=False))
    width = ids.shape[1]
    for row, prompt in enumerate(PROMPTS):
        alone = greedy(mlm, ids_of(prompt))
        assert torch.equal(cached[row, width:], alone[0, len(prompt) :]), (family, row)
    # the memory changes the greedy path (otherwise this test would not test the mixing)
    assert not torch.equal(cached, greedy(mlm.backbone, ids, mask))


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_sampling_and_beam_search_run(family):
    mlm = augmented(family, lam=0.5)
    ids, mask = left_padded(PROMPTS)
    torch.manual_seed(0)
    a = mlm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=True, top_k=20,
                     temperature=0.8, pad_token_id=PAD)
    torch.manual_seed(0)
    b = mlm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=True, top_k=20,
                     temperature=0.8, pad_token_id=PAD)
    assert a.shape == (3, ids.shape[1] + 5) and torch.equal(a, b)
    beams = mlm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, num_beams=2, do_sample=False,
                         pad_token_id=PAD)
    assert beams.shape == (3, ids.shape[1] + 5)


def test_lambda_setter_and_out_of_range():
    mlm = augmented("llama", lam=0.5)
    mlm.lam = 1
    assert mlm.lam == 1.0
    for bad in (-0.01, 1.01, float("nan")):
        with pytest.raises(ConfigError):
            mlm.lam = bad
        with pytest.raises(ConfigError):
            MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, lam=bad)


def test_fingerprint_layer_and_site_mismatches():
    tokenizer = TinyTokenizer()
    mlm = augmented("llama", tokenizer=tokenizer)
    with pytest.raises(FingerprintMismatch, match="weights_sha"):
        MemoryAugmentedForCausalLM.from_parts(tiny_backbone("llama", seed=9), mlm.memory, tokenizer=tokenizer)
    with pytest.raises(FingerprintMismatch, match="tokenizer_sha"):
        MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, tokenizer=TinyTokenizer(salt="x"))
    with pytest.raises(FingerprintMismatch, match="layer"):
        MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, key_layer=0)
    with pytest.raises(FingerprintMismatch, match="residual"):
        MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, key_site="residual")
    MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, key_layer=1.0)  # a depth fraction: the same layer


def test_from_pretrained_round_trip(tmp_path):
    tokenizer = TinyTokenizer()
    mlm = augmented("gpt2", lam=0.5, tokenizer=tokenizer)
    mlm.memory.save_pretrained(tmp_path / "mem")
    loaded = MemoryAugmentedForCausalLM.from_memory(tmp_path / "mem", mlm.backbone, tokenizer, lam=0.5)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=x).logits, mlm(input_ids=x).logits)
    with pytest.raises(FingerprintMismatch):
        MemoryAugmentedForCausalLM.from_memory(tmp_path / "mem", tiny_backbone("gpt2", seed=5), tokenizer)


def test_beam_search_lambda_zero_matches_backbone():
    mlm = augmented("llama", lam=0.0)
    ids, mask = left_padded(PROMPTS)
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=5, num_beams=3, do_sample=False, pad_token_id=PAD)
    assert torch.equal(mlm.generate(**kwargs), mlm.backbone.generate(**kwargs))


# -- the optimized decode path (fused tied head, one-pass mixing) against a plain reference


def tied_augmented(family: str, lam: float, fuse_head: bool | None = None) -> MemoryAugmentedForCausalLM:
    """A tiny backbone with a memory whose head is the backbone's output embedding (spread hidden states)."""
    from mlpmem.memory import tie_to_backbone

    backbone = tiny_backbone(family)
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(backbone, "tiny", key_layer=-1, tie_head=True)).eval()
    tie_to_backbone(memory, backbone)
    with torch.no_grad():
        memory.norm.weight.mul_(30.0)  # spread p_mem so that the memory changes the greedy path
    return MemoryAugmentedForCausalLM.from_parts(backbone, memory, lam=lam, fuse_head=fuse_head)


def plain_mixed_logprobs(mlm: MemoryAugmentedForCausalLM, sequence: torch.Tensor) -> torch.Tensor:
    """Reference: one uncached forward without hooks, the memory's own head on every position, and
    log-space mixing of the two log_softmax tensors (mixing.mix on log-probabilities). (1, T) -> (1, T, V)."""
    with torch.no_grad():
        keys = hand_keys(mlm.backbone, sequence, mlm.key_layer, mlm.key_site)  # (1, T, d)
        logp_lm = F.log_softmax(mlm.backbone(input_ids=sequence).logits.float(), -1)
        logp_mem = F.log_softmax(F.linear(mlm.memory.features(keys), mlm.memory.head.weight).float(), -1)
    return mix(logp_lm, logp_mem, mlm.lam, logits=False)


@pytest.mark.parametrize("lam", [0.3, 1.0])
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_head_equals_separate_heads(family, lam):
    fused = tied_augmented(family, lam)
    assert fused.fuse_head
    separate = MemoryAugmentedForCausalLM.from_parts(fused.backbone, fused.memory, lam=lam, fuse_head=False)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        a = fused(input_ids=ids, attention_mask=mask).logits
        b = separate(input_ids=ids, attention_mask=mask).logits
        last = fused(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)  # fp32 rounding of (2B, T, d) vs (B, T, d) GEMMs
    torch.testing.assert_close(last, a[:, -1:], rtol=1e-6, atol=1e-5)


def test_fused_head_reads_the_embedding_once_per_step():
    mlm = tied_augmented("llama", 0.5)
    head_rows, memory_head_calls = [], []
    h1 = mlm.backbone.get_output_embeddings().register_forward_hook(  # runs before the mixer's (registered first)
        lambda module, args, output: head_rows.append(tuple(output.shape)))
    h2 = mlm.memory.head.register_forward_pre_hook(lambda *a: memory_head_calls.append(1))
    ids, mask = left_padded(PROMPTS)
    greedy(mlm, ids, mask, max_new_tokens=3)
    h1.remove(), h2.remove()
    assert memory_head_calls == []
    assert len(head_rows) == 3 and all(rows[0] == 2 * len(PROMPTS) for rows in head_rows)


def test_fuse_head_needs_a_tied_head():
    mlm = augmented("llama", lam=0.5)
    assert not mlm.fuse_head
    with pytest.raises(ConfigError, match="tied"):
        MemoryAugmentedForCausalLM.from_parts(mlm.backbone, mlm.memory, fuse_head=True)


def test_mix_from_logits_equals_log_softmax_mixing():
    torch.manual_seed(0)
    a, b = torch.randn(2, 3, 40) * 10, torch.randn(2, 3, 40) * 10
    for lam in (0.0, 0.2, 1.0):
        expected = mix(F.log_softmax(a, -1), F.log_softmax(b, -1), lam, logits=False)
        torch.testing.assert_close(mix(a, b, lam), expected, rtol=0, atol=1e-5)
    assert torch.equal(mix(a, b, 0.0), F.log_softmax(a, -1))


@pytest.mark.parametrize("sample", [False, True])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_optimized_decode_equals_plain_path(family, batched, sample):
    """Every step's mixed log-probs of cached generate (fused head, kept positions, one-pass mixing) equal
    the plain reference recomputed on the finished sequences, to 1e-4 (fp32 rounding of cached attention)."""
    mlm = tied_augmented(family, 0.4)
    prompts = PROMPTS if batched else PROMPTS[:1]
    ids, mask = left_padded(prompts)
    torch.manual_seed(0)
    out = mlm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=sample, top_k=0,
                       pad_token_id=PAD, output_logits=True, return_dict_in_generate=True)
    steps = torch.stack(out.logits, dim=1)  # (B, 5, V) the mixed log-probs each step decoded from
    width = ids.shape[1]
    for row, prompt in enumerate(prompts):
        sequence = torch.cat([torch.tensor(prompt), out.sequences[row, width:]])[None]  # (1, P + 5)
        reference = plain_mixed_logprobs(mlm, sequence)[0, len(prompt) - 1 : -1]  # (5, V)
        torch.testing.assert_close(steps[row], reference, rtol=0, atol=1e-4)
    if not sample:
        assert not torch.equal(out.sequences, greedy(mlm.backbone, ids, mask, max_new_tokens=5))


def test_bf16_memory_weights_next_to_an_fp32_backbone():
    fused = tied_augmented("llama", 0.4)
    x = ids_of(PROMPTS[0])
    with torch.no_grad():
        fp32 = fused(input_ids=x).logits
        fused.memory.cast_weights(torch.bfloat16)
        separate = MemoryAugmentedForCausalLM.from_parts(fused.backbone, fused.memory, lam=0.4, fuse_head=False)
        a, b = fused(input_ids=x).logits, separate(input_ids=x).logits
    assert a.dtype == torch.float32 and fused.backbone.lm_head.weight.dtype == torch.float32
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)  # same bf16 hidden states, one fp32 head
    assert (a - fp32).abs().max() < 0.5  # bf16 blocks: close to the fp32 memory, not equal
