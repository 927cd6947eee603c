"""The learned gate: a constant gate is the fixed λ bit for bit, λ_t in [0, 1] and a normalised mixture on every
path (forward, cached batched generate, fused head, corpus head), save/load bound to its memory, and training."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny import PAD, VOCAB, TinyTokenizer, left_padded, memory_config_for, tiny_backbone
from mlpmem.errors import ConfigError, CorruptArtifact, FingerprintMismatch
from mlpmem.inference.gate import LOG_FLOOR, NUM_FEATURES, Gate, GateConfig, gate_features
from mlpmem.inference.gate_io import GATE_WEIGHTS, load_gate, memory_checksum, save_gate, saved_for
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import mix
from mlpmem.memory import MLPMemory, tie_to_backbone
from mlpmem.training.gate import GateData, GateTrainConfig, holdout_split, nll, train_gate

FAMILIES = ("llama", "gpt2")
PROMPTS = [[5, 17, 3, 99, 42, 7], [8, 9], [60, 61, 62, 63]]
HEAD_IDS = torch.tensor(sorted({*range(0, VOCAB, 3), 17, 99, 42}), dtype=torch.int64)


def make_memory(backbone, seed: int = 3, tied: bool = False, corpus_head: bool = False) -> MLPMemory:
    """A random memory with spread logits (it changes the greedy path); a corpus head scores HEAD_IDS only."""
    torch.manual_seed(seed)
    extra = {"head_vocab_size": len(HEAD_IDS)} if corpus_head else {}
    memory = MLPMemory(memory_config_for(backbone, "tiny", key_layer=-1, tie_head=tied, **extra)).eval()
    if corpus_head:
        memory.set_head_vocab(HEAD_IDS)
    if tied:
        tie_to_backbone(memory, backbone)
        with torch.no_grad():
            memory.norm.weight.mul_(30.0)
    else:
        with torch.no_grad():
            memory.head.weight.mul_(100.0)
    return memory


def random_gate(key_size: int, key_dim: int = 3, seed: int = 0, scale: float = 3.0) -> Gate:
    """A gate whose λ_t varies a lot between positions (weights far from zero)."""
    torch.manual_seed(seed)
    gate = Gate(GateConfig(hidden_size=8, key_dim=key_dim), key_size)
    with torch.no_grad():
        for p in gate.parameters():
            p.normal_(0.0, scale)
    return gate


def pair(family: str, lam: float, gate: Gate | None = None, **memory_options):
    """(fixed-λ model, gated model) on the same backbone and memory; the gate defaults to constant λ."""
    backbone = tiny_backbone(family)
    memory = make_memory(backbone, **memory_options)
    gate = gate or Gate(GateConfig(), memory.config.input_size).set_constant(lam)
    build = MemoryAugmentedForCausalLM.from_parts
    return build(backbone, memory, lam=lam), build(backbone, memory, lam=lam, gate=gate)


def greedy(model, ids, mask, **kwargs):
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": PAD, **kwargs}
    return model.generate(input_ids=ids, attention_mask=mask, **kwargs)


# -- a constant gate is the fixed λ


@pytest.mark.parametrize("corpus_head", [False, True])
@pytest.mark.parametrize("lam", [0.2, 0.7])
@pytest.mark.parametrize("family", FAMILIES)
def test_constant_gate_equals_fixed_lambda_logits_and_perplexity(family, lam, corpus_head):
    fixed, gated = pair(family, lam, corpus_head=corpus_head)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        a = fixed(input_ids=ids, attention_mask=mask, labels=ids)
        b = gated(input_ids=ids, attention_mask=mask, labels=ids)
    assert torch.equal(a.logits, b.logits)
    assert torch.equal(a.loss, b.loss)  # the perplexity exp(loss) too
    assert torch.allclose(gated.last_lambda, torch.full_like(gated.last_lambda, lam), rtol=0, atol=1e-12)


def test_constant_gate_offline_target_logprob_equals_the_fixed_mix():
    torch.manual_seed(0)
    lp_lm, lp_mem = -torch.rand(50, dtype=torch.float64) * 8, -torch.rand(50, dtype=torch.float64) * 8
    lp_mem[::7] = -math.inf  # targets outside a corpus head
    for lam in (0.05, 0.4, 0.95):
        z = torch.full((50,), math.log(lam) - math.log1p(-lam), dtype=torch.float64)
        torch.testing.assert_close(mix(lp_lm, lp_mem, z, logits=False), mix(lp_lm, lp_mem, lam, logits=False),
                                   rtol=0, atol=1e-12)


def test_an_offset_shifts_every_logit_and_is_not_saved(tmp_path):
    """set_offset(b) adds b to z everywhere (a constant gate at λ becomes sigmoid(logit(λ) + b)), 0 restores it,
    and a saved gate comes back without it; a non-number is a one-line error."""
    torch.manual_seed(0)
    gate = Gate(GateConfig(hidden_size=4))
    features = torch.randn(6, NUM_FEATURES)
    z = gate(features)
    torch.testing.assert_close(gate.set_offset(2.5)(features), z + 2.5, rtol=0, atol=1e-12)
    torch.testing.assert_close(gate.set_offset(0.0)(features), z, rtol=0, atol=0)
    constant = Gate(GateConfig()).set_constant(0.2).set_offset(math.log(3.0))
    torch.testing.assert_close(constant.lam(features), torch.full((6,), 3 * 0.2 / (3 * 0.2 + 0.8), dtype=torch.float64))
    assert "offset" not in constant.state_dict()
    for bad in (math.inf, "1", True):
        with pytest.raises(ConfigError, match="finite number"):
            gate.set_offset(bad)


def test_a_floor_closes_the_gate_exactly_below_it_and_is_not_saved():
    """Below the floor λ_t is exactly 0 and the mixture is the backbone's distribution; above it nothing changes;
    floor 0 is the gate without one, bit for bit; the mixture still sums to 1."""
    backbone = tiny_backbone("llama")
    memory = make_memory(backbone)
    gate = random_gate(memory.config.input_size)
    gated = MemoryAugmentedForCausalLM.from_parts(backbone, memory, gate=gate)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        open_logits, open_lam = gated(input_ids=ids, attention_mask=mask).logits, gated.last_lambda
        floor = open_lam[mask.bool()].median().item()
        gate.set_floor(floor)
        floored, lam_t = gated(input_ids=ids, attention_mask=mask).logits, gated.last_lambda
        lp_lm = F.log_softmax(backbone(input_ids=ids, attention_mask=mask).logits, -1)
        closed = open_lam < floor
        assert 0 < int(closed[mask.bool()].sum()) < int(mask.sum())  # some positions closed, some open
        assert bool((lam_t[closed] == 0).all()) and torch.equal(lam_t[~closed], open_lam[~closed])
        torch.testing.assert_close(floored[closed], lp_lm[closed], rtol=0, atol=1e-6)
        assert torch.equal(floored[~closed], open_logits[~closed])
        torch.testing.assert_close(torch.logsumexp(floored, -1), torch.zeros(ids.shape), rtol=0, atol=1e-5)
        assert torch.equal(gated(input_ids=ids, attention_mask=mask).logits, floored)  # idempotent
        gate.set_offset(2.0)  # the floor reads the gate before its offset: the same positions stay closed
        gated(input_ids=ids, attention_mask=mask)
        shifted = gated.last_lambda
        assert bool((shifted[closed] == 0).all()) and bool((shifted[~closed] >= lam_t[~closed]).all())
        assert bool((shifted[~closed] > lam_t[~closed]).any())  # opened further (some saturate at 1 in float64)
        gate.set_offset(0.0).set_floor(0.0)
        assert torch.equal(gated(input_ids=ids, attention_mask=mask).logits, open_logits)
    assert "floor" not in gate.state_dict()
    for bad in (1.0, -0.1, "0.2", True):
        with pytest.raises(ConfigError, match="gate floor"):
            gate.set_floor(bad)


def test_a_floor_in_the_offline_target_logprob_is_the_backbone_there():
    torch.manual_seed(0)
    lp_lm, lp_mem = -torch.rand(20, dtype=torch.float64) * 8, -torch.rand(20, dtype=torch.float64) * 8
    z = torch.randn(20, dtype=torch.float64)
    gate = Gate(GateConfig()).set_floor(0.5)
    closed = gate.closed(z)
    assert torch.equal(closed, z < 0)  # logit(0.5) = 0
    mixed = mix(lp_lm, lp_mem, z.masked_fill(closed, -math.inf), logits=False)
    assert torch.equal(mixed[closed], lp_lm[closed])
    torch.testing.assert_close(mixed[~closed], mix(lp_lm, lp_mem, z, logits=False)[~closed], rtol=0, atol=0)
    assert Gate(GateConfig()).closed(z) is None


def test_constant_needs_an_open_interval():
    gate = Gate(GateConfig())
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ConfigError):
            gate.set_constant(bad)


# -- λ_t in [0, 1], a normalised mixture, finite features


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("corpus_head", [False, True])
def test_lambda_in_unit_interval_and_mixture_sums_to_one(corpus_head, tied):
    backbone = tiny_backbone("llama")
    memory = make_memory(backbone, tied=tied, corpus_head=corpus_head)
    gate = random_gate(memory.config.input_size)
    gated = MemoryAugmentedForCausalLM.from_parts(backbone, memory, gate=gate)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        mixed = gated(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        lam_t = gated.last_lambda  # (B, T)
        p_lm = F.softmax(backbone(input_ids=ids, attention_mask=mask).logits, -1)
    assert lam_t.shape == ids.shape and bool(((lam_t >= 0) & (lam_t <= 1)).all())
    assert lam_t.std() > 0.05  # the gate really varies: the checks below are not those of one λ
    assert not torch.isnan(mixed).any()
    torch.testing.assert_close(torch.logsumexp(mixed, -1), torch.zeros(ids.shape), rtol=0, atol=1e-5)
    p_mem = mixed.exp() - (1 - lam_t[..., None]).float() * p_lm  # what the memory contributes
    assert bool((p_mem > -1e-5).all())
    if corpus_head:
        outside = torch.ones(VOCAB, dtype=torch.bool)
        outside[HEAD_IDS] = False
        torch.testing.assert_close(mixed.exp()[..., outside], ((1 - lam_t[..., None]).float() * p_lm)[..., outside],
                                   rtol=1e-5, atol=1e-7)  # p_mem is 0 there: only the backbone's share


def test_features_are_finite_with_a_corpus_head_and_match_their_definitions():
    torch.manual_seed(0)
    lm, mem = torch.randn(4, 40) * 3, torch.randn(4, 40) * 3
    mem[:, 10:] = -math.inf  # a corpus head scoring the first 10 tokens
    mem[0, 0] = 50.0  # row 0: the memory is sure of token 0
    lm[0, 0] = -50.0  # which the backbone rules out; and the backbone's argmax is outside the memory's head
    lm[0, 20] = 50.0
    f = gate_features(lm, mem)
    assert f.shape == (4, NUM_FEATURES) and torch.isfinite(f).all()
    p_lm, p_mem = F.softmax(lm, -1), F.softmax(mem, -1)
    head = F.softmax(mem[:, :10], -1)
    torch.testing.assert_close(f[:, 0], -(p_lm * p_lm.log()).sum(-1))
    torch.testing.assert_close(f[:, 2], -(head * head.log()).sum(-1))  # the entropy in the head's own tokens
    torch.testing.assert_close(f[:, 1], p_lm.max(-1).values.log())
    torch.testing.assert_close(f[:, 3], p_mem.max(-1).values.log())
    torch.testing.assert_close(f[1:, 4], p_lm[1:].gather(1, mem[1:].argmax(-1, keepdim=True))[:, 0].log())
    assert f[0, 4] == f[0, 5] == LOG_FLOOR  # p_lm(memory's argmax) ~ e^-100 and p_mem(LM's argmax) = 0: floored


# -- generate: batched, left-padded, cached


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_with_a_constant_gate_equals_the_plain_path(family, tied):
    fixed, gated = pair(family, 0.4, tied=tied)
    assert gated.fuse_head == tied
    ids, mask = left_padded(PROMPTS)
    a = greedy(fixed, ids, mask, output_logits=True, return_dict_in_generate=True)
    b = greedy(gated, ids, mask, output_logits=True, return_dict_in_generate=True)
    assert torch.equal(a.sequences, b.sequences)
    assert all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))  # every step's mixed log-probs
    assert not torch.equal(a.sequences, greedy(fixed.backbone, ids, mask))  # the memory changes the path


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_with_a_varying_gate_cache_and_batching_are_consistent(family):
    backbone = tiny_backbone(family)
    memory = make_memory(backbone, corpus_head=True)
    gated = MemoryAugmentedForCausalLM.from_parts(backbone, memory, gate=random_gate(memory.config.input_size))
    ids, mask = left_padded(PROMPTS)
    cached = greedy(gated, ids, mask, use_cache=True)
    assert torch.equal(cached, greedy(gated, ids, mask, use_cache=False))
    width = ids.shape[1]
    for row, prompt in enumerate(PROMPTS):
        alone = greedy(gated, torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long))
        assert torch.equal(cached[row, width:], alone[0, len(prompt):]), (family, row)


def test_one_backbone_pass_and_gate_on_kept_positions_only():
    backbone = tiny_backbone("llama")
    memory = make_memory(backbone)
    gated = MemoryAugmentedForCausalLM.from_parts(backbone, memory, gate=random_gate(memory.config.input_size))
    calls, rows = [], []
    h1 = backbone.model.layers[0].register_forward_hook(lambda *a: calls.append(1))
    h2 = gated.gate.register_forward_pre_hook(lambda module, args: rows.append(tuple(args[0].shape)))
    ids, mask = left_padded(PROMPTS)
    greedy(gated, ids, mask, max_new_tokens=3)
    h1.remove(), h2.remove()
    assert len(calls) == 3  # prefill + 2 cached steps, never a second pass
    assert rows == [(3, 1, NUM_FEATURES)] * 3


def test_set_gate_none_restores_the_fixed_lambda_and_key_size_is_checked():
    fixed, gated = pair("llama", 0.3, gate=random_gate(32))
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        assert not torch.equal(gated(input_ids=x).logits, fixed(input_ids=x).logits)
        gated.set_gate(None)
        assert torch.equal(gated(input_ids=x).logits, fixed(input_ids=x).logits)
    with pytest.raises(ConfigError, match="keys of size 7"):
        gated.set_gate(random_gate(7))


# -- save / load, bound to the memory


def test_save_load_round_trip_and_from_pretrained(tmp_path):
    tokenizer = TinyTokenizer()
    backbone = tiny_backbone("gpt2")
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(backbone, "tiny", key_layer=-1, tokenizer=tokenizer)).eval()
    gate = random_gate(memory.config.input_size)
    gate.fit_standardisation(torch.randn(20, NUM_FEATURES))
    memory.save_pretrained(tmp_path / "memory")
    save_gate(gate, tmp_path / "gate", memory)
    loaded = load_gate(tmp_path / "gate", memory)
    assert loaded.config == gate.config and loaded.key_size == gate.key_size
    for (name, a), b in zip(gate.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        direct = MemoryAugmentedForCausalLM.from_parts(backbone, memory, gate=gate)(input_ids=x).logits
        again = MemoryAugmentedForCausalLM.from_memory(tmp_path / "memory", backbone, tokenizer,
                                                  gate_dir=tmp_path / "gate")(input_ids=x).logits
    assert torch.equal(direct, again)


def test_a_gate_refuses_another_memory_and_damaged_weights(tmp_path, capsys):
    backbone = tiny_backbone("llama")
    memory, other = make_memory(backbone, seed=3), make_memory(backbone, seed=4)
    assert memory_checksum(memory) != memory_checksum(other)
    assert not saved_for(tmp_path / "gate", memory)  # nothing saved yet
    save_gate(random_gate(memory.config.input_size), tmp_path / "gate", memory)
    assert saved_for(tmp_path / "gate", memory) and not saved_for(tmp_path / "gate", other)
    with pytest.raises(FingerprintMismatch, match="another memory") as exc:
        load_gate(tmp_path / "gate", other)
    assert "\n" not in str(exc.value)
    weights = tmp_path / "gate" / GATE_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(CorruptArtifact, match="checksum"):
        load_gate(tmp_path / "gate", memory)


# -- training


def synthetic_data(n: int = 2000, seed: int = 0) -> GateData:
    """Positions where the memory is right when it is sure (feature max_mem high) and wrong otherwise: the best
    gate opens with max_mem, which one constant cannot do."""
    g = torch.Generator().manual_seed(seed)
    features = torch.rand(n, NUM_FEATURES, generator=g)
    sure = features[:, 3] > 0.5
    lp_lm = torch.full((n,), math.log(0.2), dtype=torch.float64)
    lp_mem = torch.where(sure, math.log(0.9), math.log(0.01)).double()
    return GateData(features, lp_lm, lp_mem)


def test_training_beats_the_constant_and_is_seeded():
    data = synthetic_data()
    config = GateTrainConfig(hidden_size=8, max_steps=300, patience=50, lr=0.05)
    gate, summary = train_gate(data, config, init_lambda=0.3)
    assert summary["holdout_ppl_best"] < 0.9 * summary["holdout_ppl_init"]
    with torch.no_grad():
        lam_t = gate.lam(data.features)
        sure = data.features[:, 3] > 0.5
        assert lam_t[sure].mean() > 0.8 and lam_t[~sure].mean() < 0.2
        again, _ = train_gate(data, config, init_lambda=0.3)
        assert torch.equal(again.lam(data.features), lam_t)


def test_training_keeps_the_constant_when_nothing_is_learnable():
    g = torch.Generator().manual_seed(1)
    n = 1000  # targets unrelated to the features: the constant start is (about) the best held-out point
    data = GateData(torch.rand(n, NUM_FEATURES, generator=g), -torch.rand(n, generator=g, dtype=torch.float64) * 5,
                    -torch.rand(n, generator=g, dtype=torch.float64) * 5)
    gate, summary = train_gate(data, GateTrainConfig(max_steps=200, patience=20), init_lambda=0.5)
    assert summary["holdout_ppl_best"] <= summary["holdout_ppl_init"]
    _, held = holdout_split(n, 256, 0.2, 0)
    assert math.isclose(math.exp(nll(gate, data.subset(held)).item()), summary["holdout_ppl_best"], rel_tol=1e-12)


def test_holdout_split_is_disjoint_contiguous_and_seeded():
    train, held = holdout_split(1000, 100, 0.3, seed=0)
    assert sorted(torch.cat([train, held]).tolist()) == list(range(1000))
    assert len(held) == 300 and len({int(i) // 100 for i in held}) == 3  # whole blocks
    assert torch.equal(held, holdout_split(1000, 100, 0.3, seed=0)[1])
    assert not torch.equal(held, holdout_split(1000, 100, 0.3, seed=1)[1])
    small_train, small_held = holdout_split(5, 256, 0.2, seed=0)
    assert len(small_train) and len(small_held)
    with pytest.raises(ConfigError):
        holdout_split(1, 256, 0.2, seed=0)


@pytest.mark.parametrize("bad", [dict(hidden_size=-1), dict(key_dim=-2), dict(lr=0.0), dict(patience=0),
                                 dict(holdout_fraction=1.0)])
def test_gate_config_errors(bad):
    with pytest.raises(ConfigError):
        GateTrainConfig(**bad)


def test_the_fixed_path_is_untouched_by_the_gate_module():
    torch.manual_seed(0)
    a, b = torch.randn(2, 3, 40) * 10, torch.randn(2, 3, 40) * 10
    gate = Gate(GateConfig(hidden_size=0)).set_constant(0.25)
    z = gate.mixing_logits(gate_features(a, b))
    assert torch.equal(mix(a, b, z), mix(a, b, 0.25)) and torch.sigmoid(z).shape == (2, 3)
