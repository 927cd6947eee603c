"""The English Wikipedia dump that gensim ships, prepared split by article or within articles.

Source: ``gensim==4.4.0`` ships ``gensim/test/test_data/enwiki-latest-pages-articles1.xml-
p000000010p000030302-shortened.bz2``, a shortened English Wikipedia dump (found on disk through
``importlib.util.find_spec('gensim')``; no network). Pages are read with
``gensim.corpora.wikicorpus.extract_pages`` keeping namespace 0 (articles) only and skipping redirects, and
cleaned with :func:`mlpmem.corpora.wikitext.clean_wikitext`. One document per article (id
``enwiki-<page id>``); articles under ``min_chars`` (200) characters after cleaning are dropped, which leaves
106 articles.

``by_article`` (``wikipedia-by-article``): the articles are ordered by ``sha256(f"{seed}:{id}")`` and cut into
train/validation/test by ``fractions`` (default 0.8/0.1/0.1: 84/11/11 articles); no article is in two splits.

``within_article`` (``wikipedia-within-article``): ``n_articles`` articles (default 60; ``choose="longest"``
takes the 60 longest, ties by id, ``choose="random"`` the first 60 in the seeded order) are each cut once, at
the paragraph boundary nearest to ``head_fraction`` (0.85) of their characters (within +-5 % of the length;
failing that a line break, a sentence end, a space). The head (id ``enwiki-<id>#head``) goes to train; the
tails (id ``enwiki-<id>#tail``, the last ~15 %) are divided by article: the first half of the chosen articles
in the seeded order (``n_articles // 2``) give their tail to validation, the others to test. Validation and
test are thus held-out continuations of articles whose beginnings are in train, and no article has a tail in
both. All other articles go to train whole. Strip the ``#head``/``#tail`` suffix (``article_id``) to get the
article of a document.
"""

from __future__ import annotations

import bz2
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
from pathlib import Path

from mlpmem.corpora.documents import SPLITS
from mlpmem.corpora.store import (
    FORMAT_VERSION,
    article_id,
    check_replaceable,
    is_prepared,
    seeded_order,
    write_corpus,
)
from mlpmem.corpora.wikitext import clean_wikitext
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.utils.io import cache_root
from mlpmem.utils.shards import sha256_file

WIKI_PACKAGE = "gensim"
WIKI_PIP_SPEC = "gensim==4.4.0"
WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKI_SETTINGS = ("by_article", "within_article")

_BOUNDARIES = (
    ("paragraph", re.compile(r"\n[ \t]*\n\s*")),
    ("line", re.compile(r"\n\s*")),
    ("sentence", re.compile(r"[.!?][\"')\]]*\s+")),
    ("space", re.compile(r"\s+")),
)


def _locate_wiki_dump() -> tuple[Path, str]:
    """The dump inside the installed gensim and gensim's version."""
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
    """``(id, title, text)`` of every article of the dump at ``path`` (cached per file version)."""
    from gensim.corpora.wikicorpus import extract_pages  # local: slow to import; mlpmem.corpora loads this module

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


def _wiki_settings(setting: str, seed: int, fractions, n_articles: int, choose: str, head_fraction: float,
                   min_chars: int, others_in_train: bool) -> dict:
    """The checked options as recorded in ``meta.json`` (only those the setting uses)."""
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
        return settings
    if choose not in ("longest", "random"):
        raise ConfigError(f"choose must be 'longest' or 'random', got {choose!r}")
    if not isinstance(n_articles, int) or n_articles < 2:
        raise ConfigError(f"n_articles must be an integer >= 2, got {n_articles!r}")
    if not 0.5 <= float(head_fraction) < 1.0:
        raise ConfigError(f"head_fraction must be in [0.5, 1), got {head_fraction!r}")
    settings.update(n_articles=n_articles, choose=choose, head_fraction=float(head_fraction))
    if not others_in_train:
        settings["others_in_train"] = False
    return settings


def _split_by_article(articles: list[dict], order: list[str], settings: dict) -> tuple[dict, str]:
    """Whole articles per split: ``(docs per split, description)``."""
    n, seed, min_chars = len(articles), settings["seed"], settings["min_chars"]
    docs: dict[str, list[dict]] = {split: [] for split in SPLITS}
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
    return docs, description


def _within_description(n: int, settings: dict, others_in_train: bool) -> str:
    seed, min_chars, choose = settings["seed"], settings["min_chars"], settings["choose"]
    n_articles, head_fraction = settings["n_articles"], settings["head_fraction"]
    n_val = n_articles // 2
    return (
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


def _split_within_article(
    articles: list[dict], order: list[str], settings: dict, others_in_train: bool
) -> tuple[dict, list[dict], str]:
    """Heads in train, tails held out: ``(docs per split, the cuts, description)``."""
    n, n_articles, seed = len(articles), settings["n_articles"], settings["seed"]
    if n_articles > n:
        raise ConfigError(f"n_articles={n_articles} but the dump has only {n} articles")
    if settings["choose"] == "longest":
        ranked = sorted(articles, key=lambda a: (-len(a["text"]), a["id"]))
        chosen_ids = [a["id"] for a in ranked[:n_articles]]
    else:
        chosen_ids = order[:n_articles]
    tails_order = seeded_order(chosen_ids, seed)
    tail_split = {aid: ("validation" if i < n_articles // 2 else "test") for i, aid in enumerate(tails_order)}
    docs: dict[str, list[dict]] = {split: [] for split in SPLITS}
    cuts = []
    for article in articles:
        aid = article["id"]
        if aid not in tail_split:
            if others_in_train:
                docs["train"].append(dict(article))
            continue
        text = article["text"]
        cut, kind = cut_point(text, settings["head_fraction"])
        head, tail = text[:cut].rstrip(), text[cut:].strip()
        docs["train"].append({"id": f"{aid}#head", "title": article["title"], "text": head, "article": aid})
        docs[tail_split[aid]].append({"id": f"{aid}#tail", "title": article["title"], "text": tail, "article": aid})
        cuts.append({"article": aid, "title": article["title"], "chars": len(text), "cut_at": cut,
                     "cut_fraction": round(cut / len(text), 4), "boundary": kind, "tail_split": tail_split[aid]})
    return docs, cuts, _within_description(n, settings, others_in_train)


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
    settings = _wiki_settings(setting, seed, fractions, n_articles, choose, head_fraction, min_chars,
                              others_in_train)
    if out_dir is None:  # one folder per distinct settings, so differently prepared variants coexist
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        out_dir = cache_root() / "corpora" / f"wikipedia-{setting}-{digest}"
    out_dir = Path(out_dir)

    dump, version = _locate_wiki_dump()
    source = {"package": WIKI_PACKAGE, "version": version, "file": f"{WIKI_PACKAGE}/{WIKI_FILE}",
              "sha256": sha256_file(dump)}
    if is_prepared(out_dir, settings, source["sha256"]):
        return out_dir
    check_replaceable(out_dir)

    articles = load_wikipedia_articles(min_chars)
    order = seeded_order([a["id"] for a in articles], seed)
    extra: dict = {}
    if setting == "by_article":
        docs, description = _split_by_article(articles, order, settings)
    else:
        docs, extra["within_article"], description = _split_within_article(articles, order, settings,
                                                                            others_in_train)
    position = {a["id"]: i for i, a in enumerate(articles)}  # keep dump order inside each split
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
        "articles": len(articles),
        **extra,
    }
    return write_corpus(out_dir, docs, meta, extra_doc_fields=("article",))
