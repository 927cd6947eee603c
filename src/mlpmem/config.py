"""The one configuration loader: typed dataclasses, checked against their type hints, read from YAML.

Every configuration of the project (the pipeline's sections, the QA suite, the benchmarks, the Memory
Mosaics experiment) is a dataclass deriving from :class:`Config`. Construction checks every field
against its type hint (``int`` stays an int, ``Literal[...]`` options are enforced, a YAML ``1e-3``, which
YAML 1.1 reads as a string, becomes the float it means) and then runs the class's own ``validate()``. A
wrong value is a one-line :class:`~mlpmem.errors.ConfigError` naming the key.

YAML files are parsed with ``yaml.safe_load``; unknown keys and a key given twice in one mapping are errors (a
typo never silently falls back to a default, and no value is silently dropped). A config argument is the path of a
YAML file or the name of a preset shipped inside the package (``mlpmem/configs/<name>.yaml``, e.g. ``quick``).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from mlpmem.errors import ConfigError

_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
PRESETS = "configs"
"""The folder of the presets inside the package: ``mlpmem/configs/<name>.yaml``."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping holding the same key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: keys given here override the merged ones
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                continue  # the base class refuses it in its own words
            if key in seen:
                raise ConfigError(f"key {key!r} appears twice in one mapping (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """``text`` parsed as ``yaml.safe_load`` does, but a key given twice in a mapping is a :class:`ConfigError`."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python objects


def presets(package: str = "mlpmem") -> list[str]:
    """The names of the presets shipped inside ``package`` (in its ``configs/`` folder)."""
    folder = resources.files(package) / PRESETS
    return sorted(f.name.removesuffix(".yaml") for f in folder.iterdir() if f.name.endswith(".yaml"))


def config_path(config: str | Path, package: str = "mlpmem") -> Path:
    """The YAML file a config argument names: a path (it has a ``/`` or ends in ``.yaml``/``.yml``), or else the
    name of a preset shipped inside ``package`` (``quick`` is ``mlpmem/configs/quick.yaml``)."""
    text = str(config)
    if "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        return Path(config)
    names = presets(package)
    if text not in names:
        raise ConfigError(f"config {text!r} is neither a YAML file path (with a '/' or ending in .yaml) nor a preset "
                          f"({', '.join(names)})")
    return Path(str(resources.files(package) / PRESETS / f"{text}.yaml"))


def _type_name(hint) -> str:
    if typing.get_origin(hint) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def check_value(value: Any, hint, where: str) -> Any:
    """``value`` converted to ``hint`` where that is lossless (int -> float, '1e-3' -> float), else an error."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        sections = []
        for option in sorted(args, key=lambda a: a is float):  # an int stays an int when int is an option
            try:
                return check_value(value, option, where)
            except ConfigError as exc:
                if isinstance(value, dict) and dataclasses.is_dataclass(option):
                    sections.append(exc)
        if len(sections) == 1:  # a mapping meant for the one section option: its own error names the cause
            raise sections[0]
        raise ConfigError(f"{where} must be {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if origin is Literal:
        if value in args and not (isinstance(value, bool) and not any(isinstance(a, bool) for a in args)):
            return value
        raise ConfigError(f"{where} must be one of {list(args)}, got {value!r}")
    if hint is type(None):
        if value is None:
            return None
    elif dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            return from_dict(hint, value, where)
        raise ConfigError(f"{where} is a section: give its keys ({where}.KEY=VALUE, or {where}: {{KEY: VALUE}} in "
                          f"YAML), not {value!r}")
    elif origin in (list, tuple) or hint in (list, tuple):
        if isinstance(value, (list, tuple)):
            if origin is tuple and args and args[-1] is not Ellipsis:
                if len(args) != len(value):
                    raise ConfigError(f"{where} must have {len(args)} items, got {len(value)}")
                items = [check_value(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args))]
            else:
                item = args[0] if args else Any
                items = [check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if (origin or hint) is tuple else items
    elif origin is dict or hint is dict:
        if isinstance(value, dict):
            kh, vh = args or (Any, Any)
            return {check_value(k, kh, f"{where} key"): check_value(v, vh, f"{where}.{k}") for k, v in value.items()}
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.match(value.strip()):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(hint, type):
        if isinstance(value, hint):
            return value
    else:
        return value  # a hint we do not check (e.g. a callable)
    raise ConfigError(f"{where} must be {_type_name(hint)}, got {value!r}")


@dataclasses.dataclass
class Config:
    """Base of every configuration dataclass: type-checked fields, then ``validate()``."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            if f.name in hints:
                setattr(self, f.name, check_value(getattr(self, f.name), hints[f.name], self._where(f.name)))
        self.validate()

    def _where(self, name: str) -> str:
        section = getattr(self, "_section", type(self).__name__)  # "" for the root of a loaded file
        return f"{section}.{name}" if section else name

    def validate(self) -> None:
        """Cross-field checks of a subclass (one-line :class:`ConfigError`)."""

    @classmethod
    def from_dict(cls, raw: dict, where: str = ""):
        return from_dict(cls, raw, where)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None):
        """Read ``path`` (a YAML file or a preset name), apply dotted ``key.sub=value`` overrides, build and check
        the config."""
        raw = read_yaml(path)
        for item in overrides or []:
            apply_override(raw, item)
        return from_dict(cls, raw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from ``path`` (a file or a preset name, see :func:`config_path`); a missing file, bad YAML, a
    key given twice, an empty file or a non-mapping are errors."""
    path = config_path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a YAML file (e.g. my-config.yaml, or a preset: quick)")
    try:
        raw = load_yaml(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file (not UTF-8)") from None
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if raw is None:
        raise ConfigError(f"config file {path} is empty")
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(raw).__name__}")
    return raw


def apply_override(raw: dict, item: str) -> None:
    """Apply a dotted ``key.sub=value`` override (value parsed as YAML) to a raw config dict. A mapping given for a
    section is merged into the section (``train={epochs: 1}`` changes ``train.epochs`` alone, the section's other
    keys stay as the file gives them); an empty value is refused (``null`` is written out)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.sub=value")
    key, text = item.split("=", 1)
    if not text.strip():
        raise ConfigError(f"override {item!r} has no value: give one after the '=' (null for none)")
    try:
        value = load_yaml(text)
    except (ConfigError, yaml.YAMLError) as exc:
        raise ConfigError(f"override {item!r}: {str(exc).splitlines()[0]}") from None
    node = raw
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {item!r}: {part} is a value, not a section")
        node = child
    node[leaf] = _merged(node.get(leaf), value)


def _merged(old, new):
    """``new`` over ``old``: mappings key by key (recursively), anything else replaced."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: _merged(old.get(k), v) for k, v in new.items()}}
    return new


def check_overrides(items: list[str], option: str = "--set") -> None:
    """Refuse a key given twice among a command line's overrides (the first value would be dropped silently)."""
    seen: dict[str, str] = {}
    for item in items:
        key = item.split("=", 1)[0]
        if key in seen:
            raise ConfigError(f"{option} {key} is given twice ({seen[key]!r}, then {item!r}): give it once")
        seen[key] = item


def _did_you_mean(raw: dict, names: set[str]) -> str:
    """``: did you mean 'epochs'?`` for an unknown key close to a known one (a typo, a case slip), else ``""``."""
    for key in raw:
        if key not in names and isinstance(key, str):
            close = difflib.get_close_matches(key.strip().lower(), sorted(names), n=1, cutoff=0.75)
            if close:
                return f": did you mean {close[0]!r}?"
    return ""


def from_dict(cls, raw: dict, where: str = ""):
    """Build dataclass ``cls`` from a dict, recursing into nested dataclasses; unknown keys are errors."""
    section = where or "root"
    if not isinstance(raw, dict):
        raise ConfigError(f"config section {section} must be a mapping, got {raw!r}")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted((repr(k) for k in raw if k not in names), key=str)
    if unknown:
        raise ConfigError(f"unknown config key(s) [{', '.join(unknown)}] in {section} ({cls.__name__})"
                          + _did_you_mean(raw, names))
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in raw.items():
        key = f"{where}.{name}".lstrip(".")
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = check_value(value, hint, key)
        else:
            kwargs[name] = value
    try:
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_section", where)
        obj.__init__(**kwargs)
        return obj
    except TypeError as exc:
        raise ConfigError(f"bad config for {section}: {exc}") from None
