"""The code's defaults are the default preset, YAML floats are floats, the memory and train options are checked."""

import typing

import pytest

from mlpmem.errors import ConfigError
from mlpmem.memory.config import INITS, PRESET_LAYERS, MemoryConfig
from mlpmem.pipeline.config import PipelineConfig


def test_code_defaults_equal_the_default_preset():
    assert PipelineConfig().to_dict() == PipelineConfig.from_yaml("default").to_dict()


def test_the_memory_keys_live_in_the_memory_section():
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['num_layers'\] in train"):
        PipelineConfig.from_yaml("default", ["train.num_layers=3"])
    cfg = PipelineConfig.from_yaml("default", ["memory.num_layers=3"])
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
