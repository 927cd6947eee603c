"""Where and at what precision a model computes: precision and device names, and the inference scope."""

import pytest
import torch

from helpers.tiny import tiny_backbone
from mlpmem.backbone import BackboneConfig
from mlpmem.compute import autocast, compute_device, inference_scope, resolve_precision
from mlpmem.errors import ConfigError


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_on_hardware_with_native_bf16(native, monkeypatch):
    monkeypatch.setattr("mlpmem.compute.cpu_has_native_bf16", lambda: native)
    assert resolve_precision("auto", "cpu") == ("bf16" if native else "fp32")
    assert resolve_precision("fp32", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ConfigError, match="precision"):
        resolve_precision("fp16", "cpu")


def test_device_names_are_validated_and_auto_follows_the_launcher(monkeypatch):
    for bad in ("gpu", "cuda:x", "", 0):
        with pytest.raises(ConfigError, match="device must be"):
            BackboneConfig(device=bad)
    assert BackboneConfig(device="cuda:1").device == "cuda:1"  # a name is valid anywhere; its use is checked
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compute_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="no CUDA device"):
        compute_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")  # rank 3 of a launch on a machine with 2 GPUs
    assert compute_device("auto") == torch.device("cuda", 1)


def test_inference_scope_keeps_autocast_and_its_weight_casts_open_between_calls(monkeypatch):
    """Inner autocast contexts nest in the scope: torch clears its cache of cast weights only when the scope
    exits, once, and the cached casts give the same logits as casting at every call."""
    model, ids = tiny_backbone(), torch.arange(1, 9)[None]
    with torch.no_grad(), autocast(model, "bf16"):
        per_call = model(input_ids=ids).logits
    clears = []
    real_clear = torch.clear_autocast_cache
    monkeypatch.setattr(torch, "clear_autocast_cache", lambda: clears.append(1) or real_clear())
    with inference_scope(model, "bf16"):
        for _ in range(3):
            with autocast(model, "bf16"):
                held = model(input_ids=ids).logits
            assert torch.is_autocast_enabled("cpu") and not torch.is_grad_enabled()
        assert not clears
    assert len(clears) == 1 and not torch.is_autocast_enabled("cpu")
    assert torch.equal(held, per_call)
    with inference_scope(model, "fp32"):
        assert not torch.is_autocast_enabled("cpu")


def test_inference_scope_caches_the_casts_of_frozen_weights_and_freezes_them_again():
    """torch caches only the casts of weights that require grad: a frozen one (a tied head) is cast once in the
    scope too, gives the same numbers, and is frozen again when the scope exits."""
    layer, x = torch.nn.Linear(64, 64), torch.randn(4, 64)
    layer.weight.requires_grad_(False)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        per_call = layer(x)
    with inference_scope(layer, "bf16"):
        with torch.profiler.profile() as prof:
            for _ in range(3):
                held = layer(x)
        assert not torch.is_grad_enabled() and held.grad_fn is None
    casts = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
    assert casts == 3 + 2  # the input at every call, the frozen weight and the bias once each (not 3 + 3 + 1)
    assert not layer.weight.requires_grad and layer.bias.requires_grad
    assert torch.equal(held, per_call)


def test_inference_scope_caches_the_frozen_weights_of_the_other_modules_it_is_given():
    """A second module run in the scope (a memory with a frozen head copy) has its frozen weights cast once too, a
    weight shared by both is handled once, and both are frozen again on exit."""
    model, head, x = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64, bias=False), torch.randn(4, 64)
    head.weight.requires_grad_(False)
    model.weight.requires_grad_(False)
    shared = torch.nn.Sequential(model)  # the same weight reached twice
    with inference_scope(model, "bf16", head, shared):
        with torch.profiler.profile() as prof:
            for _ in range(3):
                head(model(x))
    casts = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
    assert casts == 3 + 3  # the input at every call; each weight and the bias once (not 3 + 3 + 3 + 1)
    assert not model.weight.requires_grad and not head.weight.requires_grad and model.bias.requires_grad
