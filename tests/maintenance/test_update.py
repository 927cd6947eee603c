"""``mlpmem update``: new documents join a run as new shards, teacher rows and a fine-tuned memory; nothing else
changes, duplicates are skipped and counted, another backbone is refused, and a killed update leaves the run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mlpmem.maintenance.update as update_module
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import new_docs, state, tiny_run
from mlpmem.cli import main
from mlpmem.datastore import KeyStore
from mlpmem.errors import FingerprintMismatch
from mlpmem.maintenance.config import MaintenanceConfig, load_maintenance_config
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.update import update_run
from mlpmem.teacher import TeacherStore
from mlpmem.utils.io import write_jsonl

QUICK = load_maintenance_config(overrides=["update.epochs=1"])


def corpus_texts(run_dir) -> list[str]:
    return [json.loads(line)["text"] for line in (run_dir / "corpus" / "train.jsonl").read_text().splitlines()]


def test_update_adds_shards_teacher_rows_and_a_new_memory(run_dir, tmp_path):
    before = state(run_dir)
    rows_before = KeyStore(run_dir / "datastore").num_rows
    summary = update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    assert summary["added"] == 3 and summary["skipped"] == 0 and summary["rows_added"] > 0
    store = KeyStore(run_dir / "datastore")
    teacher = TeacherStore(run_dir / "teacher", datastore=store)  # checked against the new datastore
    assert store.num_rows == rows_before + summary["rows_added"] == teacher.num_rows
    after = state(run_dir)
    assert all(after[k] != before[k] for k in before)
    ledger = json.loads((run_dir / "maintenance" / "manifest.json").read_text())
    op = ledger["operations"][-1]
    assert op["kind"] == "update" and op["counts"]["documents"] == 3 and op["counts"]["rows_added"] > 0
    assert op["when"] and op["memory_sha256"] and len(op["documents"]) == 3
    assert op["config"] == QUICK.update.to_dict()  # the settings it ran with
    assert [d["name"] for d in ledger["documents"][-3:]] == ["new0", "new1", "new2"]
    assert not (run_dir / "maintenance" / "pending").exists()
    # the new positions' targets never name themselves and cover the new documents' rows
    new_ids = teacher.rows("ids")[np.arange(rows_before, store.num_rows)]
    assert (new_ids >= 0).any(axis=1).all()


def test_update_with_no_new_document_changes_nothing(run_dir, tmp_path):
    before = state(run_dir)
    held = tmp_path / "held.jsonl"
    write_jsonl(held, [{"text": t} for t in corpus_texts(run_dir)[:2]])
    summary = update_run(tiny_run(run_dir), held, MaintenanceConfig())
    assert summary == {"added": 0, "skipped": 2, "rows_added": 0, "changed": False}
    assert state(run_dir) == before and not (run_dir / "maintenance").exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert update_run(tiny_run(run_dir), empty, MaintenanceConfig())["changed"] is False
    assert state(run_dir) == before


def test_duplicates_are_skipped_and_counted(run_dir, tmp_path):
    docs = new_docs(tmp_path / "new.jsonl", n=2)
    rows = [json.loads(line) for line in docs.read_text().splitlines()]
    write_jsonl(docs, [*rows, rows[0], {"text": corpus_texts(run_dir)[0]}])  # once repeated, once in the run
    summary = update_run(tiny_run(run_dir), docs, QUICK)
    assert summary["added"] == 2 and summary["skipped"] == 2
    again = update_run(tiny_run(run_dir), docs, QUICK)
    assert again["added"] == 0 and again["skipped"] == 4 and again["changed"] is False
    ledger = json.loads((run_dir / "maintenance" / "manifest.json").read_text())
    assert [op["counts"]["skipped"] for op in ledger["operations"]] == [2]


def test_another_backbone_is_refused_by_the_fingerprint(run_dir, tmp_path, tiny_gpt2, tiny_tokenizer, capsys):
    other = tmp_path / "other-backbone"
    tiny_gpt2.save_pretrained(other)
    tiny_tokenizer.save_pretrained(other)
    before = state(run_dir)
    with pytest.raises(FingerprintMismatch, match="differs in"):
        update_run(tiny_run(run_dir, str(other)), new_docs(tmp_path / "new.jsonl"), QUICK)
    code = main(["update", str(run_dir), "--add", str(tmp_path / "new.jsonl"), "--backbone", str(other), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "differs in" in err, err
    assert state(run_dir) == before


def test_a_killed_update_leaves_the_run_and_a_rerun_completes(run_dir, tmp_path, monkeypatch):
    before = state(run_dir)
    docs = new_docs(tmp_path / "new.jsonl")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a Ctrl-C during the fine-tuning

    monkeypatch.setattr(update_module, "tune", killed)
    with pytest.raises(KeyboardInterrupt):
        update_run(tiny_run(run_dir), docs, QUICK)
    assert state(run_dir) == before and (run_dir / "maintenance" / "pending" / "plan.json").is_file()
    KeyStore(run_dir / "datastore")  # the previous run still opens and verifies
    monkeypatch.undo()
    summary = update_run(tiny_run(run_dir), docs, QUICK)
    assert summary["resumed"] and summary["added"] == 3
    assert state(run_dir)["datastore"] != before["datastore"]
    assert not (run_dir / "maintenance" / "pending").exists()


def test_a_kill_during_the_commit_is_completed_by_the_next_command(run_dir, tmp_path, monkeypatch):
    import mlpmem.utils.commit as transaction

    calls = {"n": 0}
    real = transaction._move

    def dies_on_third(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(transaction, "_move", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    monkeypatch.undo()
    again = update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)  # recovers, then skips
    assert again["changed"] is False and again["skipped"] == 3
    store = KeyStore(run_dir / "datastore")
    assert TeacherStore(run_dir / "teacher", datastore=store).num_rows == store.num_rows


def test_the_cli_updates_and_aborts(run_dir, tmp_path, capsys):
    docs = new_docs(tmp_path / "new.txt", n=2)
    lines = [json.loads(line)["text"] for line in docs.read_text().splitlines()]
    docs.write_text("\n".join(lines) + "\n")  # a text file: one document a line
    assert main(["update", str(run_dir), "--add", str(docs), "--set", "update.epochs=1", "--quiet"]) == 0
    assert "added 2 document(s)" in capsys.readouterr().out
    assert main(["update", str(run_dir), "--abort", "--quiet"]) == 0
    assert "nothing to discard" in capsys.readouterr().out
    assert main(["update", str(run_dir), "--add", str(docs), "--set", "update.epochs=0", "--quiet"]) == 2
    assert "update.epochs" in capsys.readouterr().err


def test_an_updated_run_stays_a_run_the_pipeline_reuses(run_dir, tmp_path):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    updated = state(run_dir)
    assert main(["run", str(run_dir / "config.yaml"), "--set", f"run_dir={run_dir}", "--quiet"]) == 0
    assert state(run_dir) == updated  # the datastore, teacher and memory are reused, never rebuilt
    results = json.loads((run_dir / "results.json").read_text())
    assert results["lambda"] is not None
    assert not (run_dir / "train" / "checkpoint").exists()  # it held the memory before the update
    assert main(["train", str(run_dir / "config.yaml"), "--set", f"run_dir={run_dir}", "--quiet"]) == 0
    retrained = state(run_dir)  # trained from scratch on the updated datastore and teacher
    assert retrained["memory"] != updated["memory"] and retrained["datastore"] == updated["datastore"]


def test_update_and_forget_with_an_approximate_teacher_index(tmp_path, tiny_backbone_dir):
    """The teacher's own index kind (here IVF-Flat) searches the grown or shrunk datastore."""
    from helpers.corpus import write_corpus

    corpus = write_corpus(tmp_path / "corpus", 10)
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", "--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set",
                 f"corpus.path={corpus}", "--set", f"run_dir={run_dir}", "--set", "teacher.index.kind=ivf_flat",
                 "--set", "teacher.index.nprobe=4"]) == 0
    before = state(run_dir)
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    forget_run(tiny_run(run_dir), ["new0", "new1", "new2"], load_maintenance_config(overrides=["forget.epochs=1"]))
    after = state(run_dir)
    assert after["datastore"] == before["datastore"] and after["teacher"] == before["teacher"]


def test_replay_targets_memory_teaches_the_replayed_rows_the_memory_before_the_update(run_dir, tmp_path,
                                                                                       monkeypatch):
    import torch

    from mlpmem.maintenance.finetune import load_memory
    from mlpmem.maintenance.targets import memory_rows

    run = tiny_run(run_dir)
    before = load_memory(run)
    seen = {}
    tune = update_module.tune

    def spy(run_, memory, rows, cfg, alpha, out_dir, plan_id, seed):
        seen.update(rows=rows, alpha=alpha)
        return tune(run_, memory, rows, cfg, alpha, out_dir, plan_id, seed)

    monkeypatch.setattr(update_module, "tune", spy)
    cfg = load_maintenance_config(overrides=["update.epochs=1", "update.replay_targets=memory"])
    summary = update_run(run, new_docs(tmp_path / "new.jsonl"), cfg)
    rows, n_new = seen["rows"], summary["rows_added"]
    assert seen["alpha"] == 1.0 and len(rows) == 2 * n_new  # replay ratio 1; every row carries its own label
    ids, probs, residual = memory_rows(before, rows.keys[n_new:], rows.ids.shape[1] - 1)
    assert (rows.ids[n_new:, :-1] == ids).all() and (rows.ids[n_new:, -1] == -1).all()
    np.testing.assert_allclose(rows.probs[n_new:, :-1], probs, atol=1e-3)  # staged in fp16
    np.testing.assert_allclose(rows.residual[n_new:], residual, atol=1e-6)
    # the new rows are their teacher rows folded with their own token: each sums to 1 with its residual
    np.testing.assert_allclose(rows.probs[:n_new].astype(np.float64).sum(1) + rows.residual[:n_new], 1.0, atol=2e-3)
    # memory_rows is the memory's softmax at its top-K, in full-vocabulary ids
    with torch.no_grad():
        p = torch.softmax(before(torch.from_numpy(rows.keys[n_new:][:4].astype(np.float32)), full_vocab=True), -1)
    np.testing.assert_allclose(p.gather(1, torch.from_numpy(ids[:4]).long()).numpy(), probs[:4], rtol=1e-4)
    assert json.loads((run_dir / "maintenance" / "manifest.json").read_text())["operations"][-1]["kind"] == "update"


def test_replay_draw_epoch_stages_a_replay_share_for_every_epoch(run_dir, tmp_path, monkeypatch):
    from mlpmem.training.data import EpochRows

    seen = {}
    tune = update_module.tune

    def spy(run_, memory, rows, cfg, alpha, out_dir, plan_id, seed):
        seen.update(rows=rows, seed=seed, trained=tune(run_, memory, rows, cfg, alpha, out_dir, plan_id, seed))
        return seen["trained"]

    monkeypatch.setattr(update_module, "tune", spy)
    n_old = KeyStore(run_dir / "datastore").num_rows
    cfg = load_maintenance_config(overrides=["update.epochs=3", "update.replay_draw=epoch",
                                             "update.replay_ratio=0.5", "seed=2"])
    summary = update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), cfg)
    rows, n_new = seen["rows"], summary["rows_added"]
    per_epoch = round(0.5 * n_new)
    assert rows.plan == EpochRows(fixed=n_new, draw=per_epoch)  # read back from the staged set
    assert seen["seed"] == 2  # the maintenance seed reaches the fine-tuning
    assert len(rows) == n_new + min(3 * per_epoch, n_old)  # three shares, each of distinct old rows
    assert seen["trained"]["step"] == 3 * -(-(n_new + per_epoch) // tiny_run(run_dir).cfg.train.batch_size)
