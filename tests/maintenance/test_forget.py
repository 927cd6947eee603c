"""``mlpmem forget``: documents leave a run; an update then a forget of the same documents returns the datastore
and the teacher to their previous checksums; the remaining targets equal a teacher built without them; an unknown
id is a one-line error."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mlpmem.maintenance.forget as forget_module
from helpers.corpus import write_corpus
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import new_docs, state, tiny_run
from mlpmem.cli import main
from mlpmem.datastore import KeyStore
from mlpmem.errors import MlpmemError
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.forget import forget_run
from mlpmem.maintenance.update import update_run
from mlpmem.teacher import TeacherConfig, TeacherStore, build_teacher

QUICK = load_maintenance_config(overrides=["update.epochs=1", "forget.epochs=1"])


def ledger(run_dir) -> dict:
    return json.loads((run_dir / "maintenance" / "manifest.json").read_text())


@pytest.mark.parametrize("target", ["backbone", "teacher"])
def test_update_then_forget_returns_the_datastore_and_teacher_checksums(run_dir, tmp_path, target):
    before = state(run_dir)
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    assert state(run_dir)["datastore"] != before["datastore"]
    cfg = load_maintenance_config(overrides=["forget.epochs=1", f"forget.target={target}"])
    summary = forget_run(tiny_run(run_dir), ["new0", "new1", "new2"], cfg)
    assert summary["forgotten"] == 3 and summary["shards_removed"] >= 1 and summary["teacher_shards_refreshed"] == 0
    after = state(run_dir)
    assert after["datastore"] == before["datastore"] and after["teacher"] == before["teacher"]
    assert after["memory"] != before["memory"]  # the memory was fine-tuned, twice
    ops = ledger(run_dir)["operations"]
    assert [op["kind"] for op in ops] == ["update", "forget"] and ops[1]["counts"]["documents"] == 3
    assert ops[0]["documents"] == ops[1]["documents"] and ops[1]["config"] == cfg.forget.to_dict()
    assert not list((run_dir / "maintenance" / "texts").glob("*"))  # the forgotten texts are gone too
    store = KeyStore(run_dir / "datastore")
    assert sorted(p.name for p in store.path.glob("*.npy")) == sorted(
        e["name"] for s in store.manifest["shards"] for e in s["files"].values())  # no file left behind


def test_forgetting_a_corpus_document_recomputes_the_teacher_without_it(run_dir, tmp_path):
    docs = ledger_documents(run_dir)
    windows_before = KeyStore(run_dir / "datastore").manifest["num_windows"]
    summary = forget_run(tiny_run(run_dir), [docs[1]["name"]], QUICK)
    assert summary["rows_removed"] == docs[1]["tokens"] - 1 and summary["shards_rewritten"] >= 1
    store = KeyStore(run_dir / "datastore")
    teacher = TeacherStore(run_dir / "teacher", datastore=store)
    fresh = build_teacher(store.path, tmp_path / "fresh", TeacherConfig(**_teacher_settings(teacher)), progress=False)
    assert fresh["rows"] == teacher.num_rows
    reference = TeacherStore(tmp_path / "fresh")
    for name in ("ids", "probs", "residual"):
        np.testing.assert_array_equal(teacher.array(name), reference.array(name))
    assert store.manifest["num_windows"] == windows_before - summary["windows_removed"] < windows_before
    assert docs[1]["id"] not in {d["id"] for d in ledger(run_dir)["documents"]}


def test_forgetting_from_a_run_of_few_large_shards(tmp_path, tiny_backbone_dir):
    """Every shard rewritten (datastore and teacher) and every teacher shard searched again: each takes a new file
    number, more than twice the shard count."""
    folder = tmp_path / "big-shards"
    assert main(["run", "tiny", "--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set",
                 f"corpus.path={write_corpus(tmp_path / 'corpus', 10)}", "--set", f"run_dir={folder}",
                 "--set", "datastore.batches_per_shard=64"]) == 0
    docs = ledger_documents(folder)
    shards = len(KeyStore(folder / "datastore").manifest["shards"])
    summary = forget_run(tiny_run(folder), [d["name"] for d in docs[::2]], QUICK)
    assert 2 * summary["shards_rewritten"] + summary["teacher_shards_refreshed"] > 2 * shards
    store = KeyStore(folder / "datastore")
    teacher = TeacherStore(folder / "teacher", datastore=store)
    build_teacher(store.path, tmp_path / "fresh", TeacherConfig(**_teacher_settings(teacher)), progress=False)
    np.testing.assert_array_equal(teacher.array("ids"), TeacherStore(tmp_path / "fresh").array("ids"))


def ledger_documents(run_dir) -> list[dict]:
    from mlpmem.maintenance.ledger import load_ledger

    run = tiny_run(run_dir)
    return load_ledger(run.layout, KeyStore(run.layout.datastore).num_rows)["documents"]


def _teacher_settings(teacher: TeacherStore) -> dict:
    m = teacher.manifest
    return {"k": m["k"], "temperature": m["temperature"], "top_k": m["top_k"], "index": m["index"]}


def test_an_unknown_id_is_a_one_line_error(run_dir, capsys):
    before = state(run_dir)
    with pytest.raises(MlpmemError, match="no document 'nope'"):
        forget_run(tiny_run(run_dir), ["nope"], QUICK)
    assert main(["forget", str(run_dir), "--docs", "nope,other", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("mlpmem: error: no document 'nope' (and 1 more)"), err
    assert state(run_dir) == before and not (run_dir / "maintenance").exists()


def test_a_killed_forget_leaves_the_run_and_a_rerun_completes(run_dir, tmp_path, monkeypatch):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    before = state(run_dir)

    def killed(*args, **kwargs):
        raise OSError(28, "No space left on device")  # a full disk while staging the new memory

    monkeypatch.setattr(forget_module, "save_staged_memory", killed)
    with pytest.raises(OSError):
        forget_run(tiny_run(run_dir), ["new1"], QUICK)
    assert state(run_dir) == before
    monkeypatch.undo()
    summary = forget_run(tiny_run(run_dir), ["new1"], QUICK)
    assert summary["resumed"] and summary["forgotten"] == 1
    assert [op["kind"] for op in ledger(run_dir)["operations"]] == ["update", "forget"]
    texts = list((run_dir / "maintenance" / "texts").glob("*.jsonl"))
    assert len(texts) == 1 and "new1" not in texts[0].read_text()


def test_the_cli_forgets_by_id(run_dir, tmp_path, capsys):
    update_run(tiny_run(run_dir), new_docs(tmp_path / "new.jsonl"), QUICK)
    doc = ledger(run_dir)["documents"][-1]
    assert main(["forget", str(run_dir), "--docs", doc["id"], "--set", "forget.epochs=1", "--quiet"]) == 0
    assert "forgot 1 document(s)" in capsys.readouterr().out
    assert doc["id"] not in {d["id"] for d in ledger(run_dir)["documents"]}
