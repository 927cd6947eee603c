"""Typed, validated configuration for every stage, loaded from YAML presets (``configs/*.yaml``).

Each stage has a dataclass whose ``__post_init__`` rejects bad values with a one-line error;
:class:`PipelineConfig` nests them. YAML files are parsed with ``yaml.safe_load`` and unknown keys
are errors (a typo never silently falls back to a default).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlpmem.backbone import DEFAULT_BACKBONE, SITES, check_precision
from mlpmem.baselines.knnlm import KnnLMConfig
from mlpmem.errors import ConfigError
from mlpmem.index import IndexConfig
from mlpmem.teacher import TeacherConfig
from mlpmem.train import TrainConfig


@dataclass
class BackboneConfig:
    name: str = DEFAULT_BACKBONE
    """Shipped name (``smollm2-135m``), hub name or local folder of a causal LM."""
    layer: int | float = -1
    """Key layer: an index (negative from the end) or a depth fraction in (0, 1]."""
    site: str = "ffn_input"
    """``ffn_input`` (input of the layer's feed-forward block) or ``residual`` (block output)."""
    precision: str = "fp32"
    """Compute precision of the datastore and evaluation passes: ``fp32`` or ``bf16`` (autocast, ~2x faster)."""

    def __post_init__(self):
        check_precision(self.precision)
        if self.site not in SITES:
            raise ConfigError(f"backbone.site must be one of {SITES}, got {self.site!r}")
        if isinstance(self.layer, float) and not 0 < self.layer <= 1:
            raise ConfigError(f"backbone.layer as a fraction must be in (0, 1], got {self.layer}")


@dataclass
class CorpusConfig:
    name: str | None = "shakespeare-by-play"
    """A shipped corpus (see ``mlpmem corpora``), or null when ``path`` is given."""
    options: dict = field(default_factory=dict)
    """Keyword options of the shipped corpus's prepare function (e.g. ``{n_articles: 16}``)."""
    path: str | None = None
    """A prepared folder (train/validation/test.jsonl) or raw text/JSONL file or folder, split by document."""
    validation_fraction: float = 0.1
    test_fraction: float = 0.1
    block_size: int = 512
    stride: int = 256
    max_tokens: dict[str, int] = field(default_factory=dict)
    """Optional cap per split (``{train: 50000}``) for quick runs: documents are taken in order, the last cut."""

    def __post_init__(self):
        if (self.name is None) == (self.path is None):
            raise ConfigError("corpus needs exactly one of name (a shipped corpus) or path")
        if not 0 < self.stride <= self.block_size:
            raise ConfigError(f"corpus.stride must be in (0, block_size], got {self.stride}/{self.block_size}")
        if not 0 <= self.validation_fraction < 1 or not 0 <= self.test_fraction < 1:
            raise ConfigError("corpus validation/test fractions must be in [0, 1)")
        bad = set(self.max_tokens) - {"train", "validation", "test"}
        if bad or any(v < 2 for v in self.max_tokens.values()):
            raise ConfigError("corpus.max_tokens takes train/validation/test caps >= 2")


@dataclass
class DatastoreConfig:
    batch_size: int = 4
    batches_per_shard: int = 16

    def __post_init__(self):
        if self.batch_size < 1 or self.batches_per_shard < 1:
            raise ConfigError("datastore batch_size and batches_per_shard must be >= 1")


@dataclass
class PipelineConfig:
    run_dir: str = "runs/default"
    seed: int = 0
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    datastore: DatastoreConfig = field(default_factory=DatastoreConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    teacher_temperature_from_knnlm: bool = True
    """Build the teacher with the kNN-LM temperature chosen on validation instead of ``teacher.temperature``."""
    knnlm: KnnLMConfig = field(default_factory=KnnLMConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "PipelineConfig":
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        for item in overrides or []:
            apply_override(raw, item)
        return from_dict(cls, raw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def apply_override(raw: dict, item: str) -> None:
    """Apply a dotted ``key.sub=value`` override (value parsed as YAML) to a raw config dict."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.sub=value")
    key, value = item.split("=", 1)
    node = raw
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = yaml.safe_load(value)


def from_dict(cls, raw: dict, where: str = ""):
    """Build dataclass ``cls`` from a dict, recursing into nested dataclasses; unknown keys are errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config section {where or 'root'} must be a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise ConfigError(f"unknown config key(s) {sorted(unknown)} in {where or 'root'} ({cls.__name__})")
    kwargs = {}
    for name, value in raw.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_dict(hint, value, f"{where}.{name}".lstrip("."))
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad config for {where or 'root'}: {exc}") from None
