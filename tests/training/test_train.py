import math

import numpy as np
import pytest
import torch

from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EpochRows, EvalData, TrainData, epoch_order
from mlpmem.training.loop import train_memory
from mlpmem.training.optim import lr_at
from mlpmem.training.selection import is_eval_step, kept_evaluation

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
    return MLPMemory(MemoryConfig(input_size=D, vocab_size=V, intermediate_size=16, num_layers=2,
                                    tie_head=False))


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
    with pytest.raises(ConfigError, match="trained with train.lr=0.003, but the configuration now gives train.lr=0.0"):
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


def test_epoch_rows_keep_the_fixed_rows_and_walk_through_the_pool():
    plan, n = EpochRows(fixed=5, draw=4), 17  # a pool of 12: three epochs draw every pool row once
    epochs = [plan.order(n, 0, e) for e in range(6)]
    assert all(len(rows) == plan.per_epoch(n) == 9 for rows in epochs)
    assert all(set(range(5)) <= set(rows.tolist()) for rows in epochs)
    drawn = [sorted(set(rows.tolist()) - set(range(5))) for rows in epochs]
    assert sorted(sum(drawn[:3], [])) == list(range(5, 17)) == sorted(sum(drawn[3:], []))
    assert drawn[:3] != drawn[3:]  # the second pass over the pool is another permutation
    assert np.array_equal(plan.order(n, 0, 4), epochs[4]) and not np.array_equal(plan.order(n, 1, 4), epochs[4])
    assert sorted(EpochRows(fixed=5, draw=40).order(n, 0, 3).tolist()) == list(range(n))  # draw capped by the pool


def test_an_epoch_plan_sets_the_steps_of_an_epoch(tmp_path):
    data, val = _data()
    n = len(data.targets)
    cfg = TrainConfig(epochs=2, batch_size=64, lr=1e-3, eval_every=None, precision="fp32")
    planned = TrainData(data.keys, data.targets, data.teacher_ids, data.teacher_probs, data.teacher_residual,
                        plan=EpochRows(fixed=n // 4, draw=n // 4))
    state = train_memory(_memory(), planned, val, cfg, tmp_path, progress=False)
    assert state["step"] == 2 * math.ceil((n // 2) / 64)


@pytest.mark.parametrize("bad", [dict(alpha=1.2), dict(eval_lambdas=[2.0]), dict(epochs=0), dict(precision="fp16")])
def test_train_config_errors(bad):
    with pytest.raises(ConfigError):
        TrainConfig(**bad)


def _worsening_val(val):
    """Validation whose next tokens are none of the trained ones: training makes it worse."""
    return EvalData(val.keys, (val.targets + 2) % V, val.lm_logprob)


SELECT = dict(CFG, eval_lambdas=[0.5, 1.0], eval_every=0.25)


def test_early_stop_restores_the_best_weights(tmp_path):
    data, val = _data()
    memory = _memory()
    cfg = TrainConfig(**dict(SELECT, lr=5e-2, patience=2))
    state = train_memory(memory, data, _worsening_val(val), cfg, tmp_path, progress=False)
    joint = [h["joint_ppl"] for h in state["history"]]
    assert state["stopped_early"] and state["restored_best"] and state["step"] < 30
    assert state["best_joint_ppl"] == min(joint) and len(joint) - 1 - joint.index(min(joint)) == 2
    assert state["best_step"] == state["history"][joint.index(min(joint))]["step"]
    assert kept_evaluation(state) == state["history"][joint.index(min(joint))]  # the weights kept are the best's
    assert [h["tokens_seen"] for h in state["history"]][:2] == [96, 192]  # every 3 of the 10 steps of 32 rows
    best = MLPMemory.from_pretrained(tmp_path / "best").state_dict()
    last = MLPMemory.from_pretrained(tmp_path / "checkpoint" / "memory").state_dict()
    for name, value in memory.state_dict().items():
        assert torch.equal(value, best[name]), name
    assert any(not torch.equal(v, last[k]) for k, v in memory.state_dict().items())


@pytest.mark.parametrize("stop_after", [7, 9, 10])  # after a checkpoint-less step, an evaluation, the stop
def test_resume_with_selection_equals_uninterrupted(tmp_path, stop_after):
    data, val = _data()
    val = _worsening_val(val)
    cfg = dict(SELECT, lr=5e-2, patience=3)
    full = _memory()
    s_full = train_memory(full, data, val, TrainConfig(**cfg), tmp_path / "a", progress=False)
    train_memory(_memory(), data, val, TrainConfig(**cfg), tmp_path / "b", progress=False, stop_after=stop_after)
    resumed = _memory()
    s_res = train_memory(resumed, data, val, TrainConfig(**cfg), tmp_path / "b", progress=False)
    assert s_full["stopped_early"] and s_res["step"] == s_full["step"] == 10  # evaluations at 3, 6, 9, 10
    assert (s_res["best_step"], s_res["stopped_early"]) == (s_full["best_step"], s_full["stopped_early"])
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    again = _memory()  # a rerun after the early stop: nothing more is trained, the best weights are restored
    s_again = train_memory(again, data, val, TrainConfig(**cfg), tmp_path / "b", progress=False)
    assert s_again["step"] == s_full["step"] and s_again["restored_best"]
    for (name, a), b in zip(full.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_plain_run_keeps_its_last_weights_and_evaluates_at_epoch_ends(tmp_path):
    data, val = _data()
    memory = _memory()
    state = train_memory(memory, data, _worsening_val(val), TrainConfig(**dict(CFG, lr=5e-2)), tmp_path,
                         progress=False)
    assert [h["epoch"] for h in state["history"]] == [1, 2, 3] and not state["restored_best"]
    assert kept_evaluation(state)["epoch"] == 3 and kept_evaluation({"history": []}) is None
    assert (tmp_path / "best" / "model.safetensors").exists()
    last = MLPMemory.from_pretrained(tmp_path / "checkpoint" / "memory").state_dict()
    for name, value in memory.state_dict().items():
        assert torch.equal(value, last[name]), name


def test_linear_schedule_and_warmup_steps():
    cfg = TrainConfig(schedule="linear", warmup_steps=10, min_lr_fraction=0.1)
    assert [lr_at(s, 110, cfg) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert [lr_at(s, 110, cfg) for s in (10, 60, 110)] == pytest.approx([1.0, 0.55, 0.1])
    cosine = TrainConfig(warmup_steps=10, min_lr_fraction=0.1)
    assert lr_at(60, 110, cosine) == pytest.approx(0.55) and lr_at(35, 110, cosine) > lr_at(35, 110, cfg)


@pytest.mark.parametrize("bad,match", [(dict(patience=0), "train.patience"), (dict(eval_every=0), "train.eval_every"),
                                       (dict(eval_every=-0.5), "train.eval_every"),
                                       (dict(warmup_steps=-1), "train.warmup_steps"),
                                       (dict(schedule="step"), "schedule")])
def test_selection_config_errors_are_one_line(bad, match):
    with pytest.raises(ConfigError, match=match) as err:
        TrainConfig(**bad)
    assert "\n" not in str(err.value)


def test_eval_every_longer_than_the_run_is_a_config_error(tmp_path):
    data, val = _data()
    with pytest.raises(ConfigError, match="train.eval_every") as err:
        train_memory(_memory(), data, val, TrainConfig(**dict(CFG, eval_every=4.0)), tmp_path, progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "checkpoint").exists()


def test_evaluations_are_counted_from_each_epoch_start():
    steps = [s for s in range(1, 2 * 79 + 1) if is_eval_step(s, 79, 40)]
    assert steps == [40, 79, 119, 158]  # never one step after an epoch end
    assert [s for s in range(1, 11) if is_eval_step(s, 5, None)] == [5, 10]
