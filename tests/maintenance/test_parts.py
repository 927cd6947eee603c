"""The pieces of the maintenance package on their own: the mixed label equals the hybrid loss, targets restricted to
a corpus head, a widened head, the documents' rows and ids, the commit's renames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.tiny import memory_config_for
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.maintenance.documents import Holdings, doc_id, read_new_documents
from mlpmem.maintenance.finetune import replay_rows, replay_sample, widen_head
from mlpmem.maintenance.targets import fold_label, pure_label, restrict_to_head
from mlpmem.maintenance.transaction import Pending
from mlpmem.memory import MLPMemory, tie_to_backbone
from mlpmem.training.loss import sparse_hybrid_loss
from mlpmem.utils.commit import recover


def test_the_folded_label_has_the_hybrid_losss_gradient():
    """With no residual mass, α·KL(p‖q) + (1 − α)·CE and KL(α·p + (1 − α)·δ ‖ q) differ by a constant: the same
    gradient, whether the target is inside the top-K or not."""
    torch.manual_seed(0)
    n, vocab, k, alpha = 6, 20, 4, 0.4
    ids = torch.stack([torch.randperm(vocab)[:k] for _ in range(n)]).to(torch.int32)  # (n, K) unique per row
    probs = torch.softmax(torch.randn(n, k), -1)
    residual = torch.zeros(n)
    outside = [next(t for t in range(vocab) if t not in row.tolist()) for row in ids]
    targets = torch.tensor([int(ids[i, 0]) if i % 2 == 0 else outside[i] for i in range(n)])  # in, out, in, ...
    logits = torch.randn(n, vocab, requires_grad=True)
    sparse_hybrid_loss(logits, ids, probs, residual, targets, alpha)[0].backward()
    reference, logits.grad = logits.grad.clone(), None
    f_ids, f_probs, f_res = fold_label((ids.numpy(), probs.numpy(), residual.numpy()), targets.numpy(), alpha)
    assert f_ids.shape == (n, k + 1) and np.allclose(f_probs.sum(1) + f_res, 1.0, atol=1e-6)
    sparse_hybrid_loss(logits, torch.from_numpy(f_ids), torch.from_numpy(f_probs), torch.from_numpy(f_res),
                       targets, 1.0)[0].backward()
    torch.testing.assert_close(logits.grad, reference, atol=1e-6, rtol=1e-5)


def test_targets_outside_a_corpus_head_move_to_the_residual():
    ids = np.array([[3, 9, -1], [9, 4, 5]], np.int32)
    probs = np.array([[0.5, 0.3, 0.0], [0.6, 0.2, 0.1]], np.float32)
    rows = restrict_to_head((ids, probs, np.array([0.2, 0.1], np.float32)), np.array([3, 4, 5]))
    assert rows[0].tolist() == [[3, -1, -1], [-1, 4, 5]]
    np.testing.assert_allclose(rows[2], [0.5, 0.7], atol=1e-6)
    np.testing.assert_allclose(rows[1].sum(1) + rows[2], [1.0, 1.0], atol=1e-6)
    pure = pure_label(rows)
    assert pure[0].shape == (2, 4) and (pure[0][:, -1] == -1).all()


@pytest.mark.parametrize("tie", [True, False])
def test_a_widened_head_keeps_its_rows_and_scores_the_new_tokens(tiny_llama, tiny_tokenizer, tie):
    config = memory_config_for(tiny_llama, "tiny", -1, "ffn_input", tiny_tokenizer, tie_head=tie,
                                        head_vocab_size=3)
    memory = MLPMemory(config)
    memory.set_head_vocab(torch.tensor([2, 5, 9]))
    if tie:
        tie_to_backbone(memory, tiny_llama)
    keys = torch.randn(4, config.input_size)
    wider = widen_head(memory, np.array([5, 7, 11]), tiny_llama)
    assert wider.vocab_ids.tolist() == [2, 5, 7, 9, 11]
    before, after = memory(keys), wider(keys)  # full-vocabulary logits, -inf outside each head
    torch.testing.assert_close(after[:, [2, 5, 9]], before[:, [2, 5, 9]])
    assert torch.isfinite(after[:, [7, 11]]).all()
    assert widen_head(wider, np.array([2, 7]), tiny_llama) is wider  # nothing new: the same memory


def test_documents_rows_ids_and_names():
    held = Holdings([{"id": "a", "name": "first", "tokens": 4}, {"id": "b", "name": "b", "tokens": 2},
                     {"id": "a", "name": "again", "tokens": 3}])
    assert held.num_rows == 3 + 1 + 2 and list(held.rows_of(2)) == [4, 5]
    assert held.document_of(np.array([0, 2, 3, 5, -1])).tolist() == [0, 0, 1, 2, -1]
    assert held.find(["a"]) == [0, 2] and held.find(["again", "b"]) == [1, 2]
    with pytest.raises(MlpmemError, match="no document 'zzz'"):
        held.find(["b", "zzz"])
    assert doc_id("x") == doc_id("x") != doc_id("x ") and len(doc_id("x")) == 16
    assert replay_sample(np.arange(10), 20, 0).tolist() == list(range(10))
    assert len(set(replay_sample(np.arange(100), 7, 1))) == 7


def test_new_documents_from_text_and_jsonl(tmp_path):
    text = tmp_path / "docs.txt"
    text.write_text("first line\n\n  second line  \n")
    docs = read_new_documents(text)
    assert [(d.name, d.text) for d in docs] == [("docs:1", "first line"), ("docs:3", "second line")]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "one", "id": "doc-one"}\n{"text": "two"}\n')
    assert [d.name for d in read_new_documents(jsonl)] == ["doc-one", "docs:2"]
    with pytest.raises(MlpmemError, match="not found"):
        read_new_documents(tmp_path / "missing.jsonl")


def test_a_commit_is_completed_after_a_kill(tmp_path):
    run = tmp_path / "run"
    (run / "memory").mkdir(parents=True)
    (run / "memory" / "w").write_text("old")
    (run / "manifest.json").write_text("old")
    pending = Pending(run)
    assert pending.start({"kind": "update"}, "mlpmem update RUN") is False
    assert pending.start({"kind": "update"}, "mlpmem update RUN") is True
    with pytest.raises(MlpmemError, match="unfinished update"):
        pending.start({"kind": "forget"}, "mlpmem forget RUN")
    (pending.path("memory")).mkdir()
    (pending.path("memory", "w")).write_text("new")
    pending.path("manifest.json").write_text("new")
    (run / "stale").write_text("x")
    pending.commit([(pending.path("manifest.json"), run / "manifest.json"), (pending.path("memory"), run / "memory")],
                   [run / "stale"])
    assert (run / "manifest.json").read_text() == "new" and (run / "memory" / "w").read_text() == "new"
    assert not (run / "stale").exists() and not pending.root.exists()
    assert recover(run) is False


def test_replay_rows_once_or_a_share_per_epoch():
    from mlpmem.maintenance.config import TuneConfig
    from mlpmem.training.data import EpochRows

    once, plan = replay_rows(np.arange(100), 10, TuneConfig(replay_ratio=2, epochs=3), seed=0)
    assert len(once) == 20 and plan is None  # one sample, every staged row every epoch
    fresh, plan = replay_rows(np.arange(100), 10, TuneConfig(replay_ratio=2, epochs=3, replay_draw="epoch"), seed=0)
    assert len(set(fresh.tolist())) == 60 and plan == EpochRows(fixed=10, draw=20)
    capped, _ = replay_rows(np.arange(30), 10, TuneConfig(replay_ratio=2, epochs=3, replay_draw="epoch"), seed=0)
    assert capped.tolist() == list(range(30))
    with pytest.raises(ConfigError, match="replay_draw"):
        TuneConfig(replay_draw="always")


def test_a_runs_documents_behind_a_relative_path_name_the_directory_to_run_from(tmp_path, monkeypatch):
    import json

    from mlpmem.maintenance.documents import corpus_documents
    from mlpmem.utils.shards import MANIFEST

    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / MANIFEST).write_text(json.dumps({"source": [["runs/study/data/train.jsonl", 10, 0]]}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MlpmemError, match=r"runs/study/data/train.jsonl .*relative to the directory the run was built"):
        corpus_documents(tokens, 0)


def test_the_maintenance_seed_moves_the_fine_tunings_seed(run_dir):
    from helpers.maintenance import tiny_run
    from mlpmem.maintenance.config import TuneConfig
    from mlpmem.maintenance.finetune import tune_config

    run = tiny_run(run_dir)
    assert tune_config(run, TuneConfig(), 0.4).seed == run.cfg.train.seed  # seed 0: the run's own
    assert tune_config(run, TuneConfig(), 0.4, seed=3).seed == run.cfg.train.seed + 3
