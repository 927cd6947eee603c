"""The code's defaults are the default preset, keys that moved name their new place, YAML floats are floats."""

import typing

import pytest

from helpers.paths import CONFIGS
from mlpmem.errors import ConfigError
from mlpmem.memory.config import INITS, PRESET_LAYERS, MemoryConfig
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.training.config import TrainConfig


def test_code_defaults_equal_the_default_preset():
    assert PipelineConfig().to_dict() == PipelineConfig.from_yaml(CONFIGS / "default.yaml").to_dict()


@pytest.mark.parametrize("key", sorted(TrainConfig.moved))
def test_a_moved_train_key_names_its_new_place(tmp_path, key):
    old = tmp_path / "old.yaml"
    old.write_text(f"train: {{{key}: 2}}\n")
    with pytest.raises(ConfigError, match=rf"train\.{key} moved to memory\.{key}") as exc:
        PipelineConfig.from_yaml(old)
    assert "\n" not in str(exc.value)


def test_a_moved_key_as_an_override():
    with pytest.raises(ConfigError, match=r"memory\.num_layers"):
        PipelineConfig.from_yaml(CONFIGS / "default.yaml", ["train.num_layers=3"])
    cfg = PipelineConfig.from_yaml(CONFIGS / "default.yaml", ["memory.num_layers=3"])
    assert cfg.memory.num_layers == 3


def test_yaml_exponent_is_a_float(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("train: {lr: 1e-3}\n")  # YAML 1.1 reads 1e-3 (no dot) as a string
    lr = PipelineConfig.from_yaml(path).train.lr
    assert isinstance(lr, float) and lr == 1e-3


@pytest.mark.parametrize("bad", [dict(init="zeros"), dict(preset="huge"), dict(num_layers=0),
                                 dict(intermediate_size=-1), dict(tie_head="yes")])
def test_memory_section_errors(bad):
    with pytest.raises(ConfigError):
        MemoryConfig(**bad)


def test_memory_section_options_are_the_memorys():
    hints = typing.get_type_hints(MemoryConfig)
    assert set(typing.get_args(hints["preset"])) == set(PRESET_LAYERS)
    assert set(typing.get_args(hints["init"])) == set(INITS)


@pytest.mark.parametrize("key,value", [("precision", "fp16"), ("sharding", "zero3")])
def test_enumerated_train_options(tmp_path, key, value):
    path = tmp_path / "bad.yaml"
    path.write_text(f"train: {{{key}: {value}}}\n")
    with pytest.raises(ConfigError, match=rf"train\.{key} must be one of"):
        PipelineConfig.from_yaml(path)
