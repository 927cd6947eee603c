import numpy as np
import pytest
import torch

from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData, epoch_order
from mlpmem.training.loop import train_memory
from mlpmem.training.optim import lr_at

V, D, N = 24, 8, 300


def _data(seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, D)).astype(np.float32)
    cls = rng.integers(0, 6, N)
    keys = (centers[cls] + 0.1 * rng.normal(size=(N, D))).astype(np.float16)
    targets = (cls * 3 + rng.integers(0, 2, N)).astype(np.int32)  # each cluster predicts 2 tokens
    ids = np.stack([cls * 3, cls * 3 + 1, np.full(N, -1)], 1).astype(np.int32)
    probs = np.stack([np.full(N, 0.5), np.full(N, 0.4), np.zeros(N)], 1).astype(np.float16)
    residual = np.full(N, 0.1, np.float32)
    lm = np.full(N, np.log(1 / V), np.float32)  # a uniform "backbone"
    return TrainData(keys, targets, ids, probs, residual), EvalData(keys[:100], targets[:100], lm[:100])


def _memory():
    torch.manual_seed(0)
    return MLPMemory(MemoryConfig(input_size=D, vocab_size=V, intermediate_size=16, num_layers=2))


CFG = dict(epochs=3, batch_size=32, lr=3e-3, checkpoint_every=4, eval_lambdas=[0.0, 0.5, 1.0], alpha=0.4,
           precision="fp32")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_learns_and_beats_uniform_backbone(tmp_path, precision):
    data, val = _data()
    cfg = TrainConfig(**dict(CFG, epochs=15, lr=1e-2, precision=precision))
    state = train_memory(_memory(), data, val, cfg, tmp_path, progress=False)
    last = state["history"][-1]
    assert last["memory_ppl"] < 0.3 * V  # the backbone here is uniform: PPL = V
    assert last["joint_ppl"] < last["backbone_ppl"]
    assert state["history"][0]["memory_ppl"] > last["memory_ppl"]


def test_resumed_run_equals_uninterrupted(tmp_path):
    data, val = _data()
    full = _memory()
    s_full = train_memory(full, data, val, TrainConfig(**CFG), tmp_path / "a", progress=False)
    part = _memory()
    train_memory(part, data, val, TrainConfig(**CFG), tmp_path / "b", progress=False, stop_after=13)
    resumed = _memory()  # a fresh process: new weights, state read back from the checkpoint
    s_res = train_memory(resumed, data, val, TrainConfig(**CFG), tmp_path / "b", progress=False)
    assert s_res["step"] == s_full["step"]
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_corrupt_checkpoint_and_changed_config(tmp_path):
    data, val = _data()
    train_memory(_memory(), data, val, TrainConfig(**CFG), tmp_path, progress=False, stop_after=4)
    with pytest.raises(ConfigError, match="another train config"):
        train_memory(_memory(), data, val, TrainConfig(**dict(CFG, lr=1e-3)), tmp_path, progress=False)
    opt = tmp_path / "checkpoint" / "optimizer.safetensors"
    opt.write_bytes(opt.read_bytes()[:100])
    with pytest.raises(CorruptArtifact, match="checkpoint"):
        train_memory(_memory(), data, val, TrainConfig(**CFG), tmp_path, progress=False)



def test_fsdp_on_one_process_is_the_plain_run(tmp_path):
    """With one process ``sharding: fsdp`` shards nothing: the very same steps as ``ddp``."""
    data, val = _data()
    plain, fsdp = _memory(), _memory()
    train_memory(plain, data, val, TrainConfig(**CFG), tmp_path / "a", progress=False)
    train_memory(fsdp, data, val, TrainConfig(**dict(CFG, sharding="fsdp")), tmp_path / "b", progress=False)
    for (name, a), b in zip(plain.state_dict().items(), fsdp.state_dict().values()):
        assert torch.equal(a, b), name


def test_schedule_and_order():
    cfg = TrainConfig(warmup_fraction=0.1, min_lr_fraction=0.1)
    lrs = [lr_at(s, 100, cfg) for s in range(100)]
    assert lrs[0] < lrs[9] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1, abs=1e-3)
    assert np.array_equal(epoch_order(50, 0, 1), epoch_order(50, 0, 1))
    assert not np.array_equal(epoch_order(50, 0, 1), epoch_order(50, 0, 2))


@pytest.mark.parametrize("bad", [dict(alpha=1.2), dict(eval_lambdas=[2.0]), dict(epochs=0), dict(precision="fp16")])
def test_train_config_errors(bad):
    with pytest.raises(ConfigError):
        TrainConfig(**bad)
