"""The one configuration loader: values checked against their type hints, nested sections, one-line errors."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mlpmem.config import Config, from_dict, read_yaml
from mlpmem.errors import ConfigError


@dataclass
class Inner(Config):
    size: int = 1

    def validate(self) -> None:
        if self.size < 1:
            raise ConfigError(f"{self._where('size')} must be >= 1, got {self.size}")


@dataclass
class Outer(Config):
    rate: float = 0.5
    count: int | float = 3
    inner: Inner = field(default_factory=Inner)
    optional: Inner | None = None


def test_values_are_converted_only_where_lossless():
    cfg = from_dict(Outer, {"rate": "1e-3", "count": 2})
    assert cfg.rate == 0.001 and isinstance(cfg.count, int)  # an int stays an int when int is an option
    with pytest.raises(ConfigError, match="rate must be float, got 'fast'"):
        from_dict(Outer, {"rate": "fast"})


def test_nested_sections_are_built_and_unknown_keys_refused():
    cfg = from_dict(Outer, {"inner": {"size": 4}, "optional": {"size": 2}})
    assert cfg.inner.size == 4 and cfg.optional.size == 2
    assert from_dict(Outer, {"optional": None}).optional is None
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['sise'\] in inner"):
        from_dict(Outer, {"inner": {"sise": 4}})


def test_an_optional_sections_own_error_names_the_cause():
    """A mapping given for ``Inner | None`` fails with Inner's own message, not "must be Inner or NoneType"."""
    with pytest.raises(ConfigError, match="size must be >= 1, got 0") as exc:
        from_dict(Outer, {"optional": {"size": 0}})
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="unknown config key"):
        from_dict(Outer, {"optional": {"sise": 1}})
    with pytest.raises(ConfigError, match="must be Inner or NoneType, got 3"):  # not a mapping: either type
        from_dict(Outer, {"optional": 3})


def test_a_key_given_twice_is_a_one_line_error_naming_it(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("rate: 0.1\ninner:\n  size: 2\n  size: 3\n")
    with pytest.raises(ConfigError, match=r"twice\.yaml: key 'size' appears twice in one mapping \(line 4\)") as exc:
        read_yaml(path)
    assert "\n" not in str(exc.value)
    path.write_text("rate: 0.1\nrate: 0.2\n")
    with pytest.raises(ConfigError, match="key 'rate' appears twice"):
        Outer.from_yaml(path)
    path.write_text("rate: 0.1\ninner: {size: 2}\n")  # the same key in two mappings is fine
    assert Outer.from_yaml(path).inner.size == 2
    path.write_text("base: &base {size: 2}\ninner:\n  <<: *base\n  size: 3\n")  # overriding a merged key is fine
    assert read_yaml(path)["inner"] == {"size": 3}
    with pytest.raises(ConfigError, match=r"override 'inner=\{size: 1, size: 2\}': key 'size' appears twice"):
        Outer.from_yaml(path, ["inner={size: 1, size: 2}"])
