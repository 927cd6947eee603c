"""The pieces of a run folder's bookkeeping, one by one: stage records, the run_dir and backbone checks,
config.yaml ownership, removing only what mlpmem wrote, the folder lock."""

from __future__ import annotations

import pytest
import yaml

from mlpmem.errors import ConfigError, StaleArtifact
from mlpmem.freshness import MISSING, check, differences, flatten, is_current, staleness
from mlpmem.layout import is_train_written, is_written
from mlpmem.pipeline.run import CONFIG_HEADER, check_backbone_name, is_own_config
from mlpmem.utils.io import remove_written
from mlpmem.utils.lock import LOCK_NAME, folder_lock, read_holder


def test_flatten_and_differences_over_every_key_of_either():
    flat = flatten({"train": {"lr": 0.003, "eval_lambdas": [0.0, 1.0]}, "seed": 0})
    assert flat == {"train.lr": 0.003, "train.eval_lambdas": [0.0, 1.0], "seed": 0}
    assert differences(flat, {**flat, "train.lr": 0.03}) == [("train.lr", 0.003, 0.03)]
    assert differences(flat, flat) == [] and is_current(flat, flat) and not is_current(None, flat)
    # a key the record lacks (written before it was recorded) or one it has that is no longer given: stale
    assert differences(flat, {**flat, "datastore.pack": True}) == [("datastore.pack", MISSING, True)]
    assert differences({**flat, "gone": 1}, flat) == [("gone", 1, MISSING)]


def test_one_line_staleness_names_the_first_setting_and_the_hint():
    with pytest.raises(StaleArtifact) as exc:
        check({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5, "c": 4}, "the memory in runs/x", "retrain it")
    assert str(exc.value) == ("the memory in runs/x was built with b=2, but the configuration now gives b=5 "
                              "(and 1 more setting): retrain it")
    assert staleness({"a": 1}, {"a": 1, "pack": False}) == "records no pack"
    assert staleness({"a": 1}, {"a": 1}) is None


@pytest.mark.parametrize("name,ok", [("smollm2-135m", True), ("org/model", True), ("/no/such/model", False),
                                     ("./missing", False), ("~/nothing-here", False), ("a/b/c", False)])
def test_backbone_name_that_is_a_missing_path_is_a_one_line_error(name, ok):
    if ok:
        assert check_backbone_name(name) == name
    else:
        with pytest.raises(ConfigError, match="no such model folder"):
            check_backbone_name(name)


def test_backbone_name_of_a_file_or_folder(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_backbone_name(str(tmp_path / "weights.bin"))
    assert check_backbone_name(str(tmp_path)) == str(tmp_path)


def test_own_config_is_mlpmems_header_or_a_plain_dump(tmp_path):
    path = tmp_path / "config.yaml"
    raw = {"run_dir": "runs/x", "train": {"lr": 0.003}}
    path.write_text(CONFIG_HEADER + yaml.safe_dump(raw, sort_keys=False))
    assert is_own_config(path)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))  # written before the header existed
    assert is_own_config(path)
    path.write_text("# mine\n" + yaml.safe_dump(raw, sort_keys=False))
    assert not is_own_config(path)
    path.write_text("train: {lr: 0.003}\n")  # the user's own layout
    assert not is_own_config(path)


def test_names_mlpmem_writes():
    assert all(map(is_written, ("datastore", ".lock", "stages", "memory.sha256.json", ".memory.old123", "x.tmp")))
    assert not any(map(is_written, ("notes.txt", "src", ".git")))
    assert all(map(is_train_written, ("checkpoint", "checkpoint.tmp", "checkpoint.old", "best", ".best.tmp12")))
    assert not is_train_written("my-notes.txt")


def test_remove_written_keeps_the_users_files(tmp_path):
    train = tmp_path / "train"
    (train / "checkpoint" / "memory").mkdir(parents=True)
    (train / "checkpoint" / "memory" / "model.safetensors").write_text("x")
    (train / "train_state.json").write_text("{}")
    (train / "notes.txt").write_text("mine")
    assert remove_written(train, is_train_written) == ["notes.txt"]
    assert sorted(p.name for p in train.iterdir()) == ["notes.txt"]
    (train / "notes.txt").unlink()
    (train / "best").mkdir()
    assert remove_written(train, is_train_written) == [] and not train.exists()


def test_lock_records_its_holder_and_clears_it_on_release(tmp_path):
    with folder_lock(tmp_path, "mlpmem run x") as stale:
        assert stale is None
        holder = read_holder(tmp_path / LOCK_NAME)
        assert holder["command"] == "mlpmem run x" and holder["pid"] > 0 and holder["host"]
        with folder_lock(tmp_path):  # re-entrant
            pass
        assert read_holder(tmp_path / LOCK_NAME)["command"] == "mlpmem run x"  # still held by the outer one
    assert read_holder(tmp_path / LOCK_NAME) == {}
