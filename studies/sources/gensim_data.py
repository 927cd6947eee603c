"""Published evaluation data that ships in gensim's test data (``gensim==4.4.0``, a dependency of mlpmem).

- ``questions-words.txt``: the word2vec analogy set (Mikolov et al., 2013), 19,544 questions in 14 categories,
  ``: category`` lines followed by ``a b c d`` lines (a is to b as c is to d);
- ``pang_lee_polarity.cor``: 200 sentence-polarity items (Pang & Lee), ``__label__pos|neg sentence`` a line.

A malformed line is a one-line error naming the file and line; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlpmem.errors import CorpusError
from studies.sources.packages import installed_file

INSTALL = "gensim==4.4.0"
TEST_DATA = "test/test_data"


@dataclass(frozen=True)
class Analogy:
    """``a`` is to ``b`` as ``c`` is to ``d``, in ``category``; ``id`` is the line number in the file."""

    id: str
    category: str
    a: str
    b: str
    c: str
    d: str


@dataclass(frozen=True)
class Polarity:
    """A sentence and its label, ``positive`` or ``negative``."""

    id: str
    sentence: str
    label: str


def data_file(name: str) -> Path:
    return installed_file("gensim", f"{TEST_DATA}/{name}", INSTALL)


def parse_analogies(text: str, where: str) -> list[Analogy]:
    category = None
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.startswith(":"):
            category = line[1:].strip()
            continue
        words = line.split()
        if category is None or len(words) != 4:
            raise CorpusError(f"{where} line {number} is not 'a b c d' under a ': category' line")
        items.append(Analogy(f"analogy-{number}", category, *words))
    if not items:
        raise CorpusError(f"{where} holds no analogy")
    return items


POLARITY_ENCODING = "cp1252"
"""The polarity file keeps the Windows-1252 bytes of the original release (e.g. 0x97 for an em dash)."""
LABELS = {"__label__pos": "positive", "__label__neg": "negative"}


def parse_polarity(text: str, where: str) -> list[Polarity]:
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        label, _, sentence = line.strip().partition(" ")
        if label not in LABELS or not sentence.strip():
            raise CorpusError(f"{where} line {number} is not '__label__pos|neg sentence'")
        items.append(Polarity(f"polarity-{number}", sentence.strip(), LABELS[label]))
    if not items:
        raise CorpusError(f"{where} holds no polarity item")
    return items


def _text(path: Path, encoding: str) -> str:
    try:
        return path.read_text(encoding=encoding)
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path} is not {encoding} text ({err.reason} at byte {err.start})") from None


def analogies() -> list[Analogy]:
    """Every analogy question, in file order."""
    path = data_file("questions-words.txt")
    return parse_analogies(_text(path, "utf-8"), str(path))


def polarity() -> list[Polarity]:
    """Every polarity item, in file order."""
    path = data_file("pang_lee_polarity.cor")
    return parse_polarity(_text(path, POLARITY_ENCODING), str(path))
