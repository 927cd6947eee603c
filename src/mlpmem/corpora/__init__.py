"""Corpora: documents from text/JSONL, the shipped corpora, memory-mapped token streams.

The shipped corpora: ``CORPORA`` and ``prepare`` (:mod:`.registry`), the prepared-folder format
(:mod:`.store`), and the sources (:mod:`.wikipedia` with :mod:`.wikitext`, :mod:`.shakespeare`).
"""

from mlpmem.corpora.documents import SPLITS
from mlpmem.corpora.registry import CORPORA, prepare
from mlpmem.corpora.shakespeare import download_shakespeare, prepare_shakespeare, read_shakespeare_archive
from mlpmem.corpora.store import FORMAT_VERSION, article_id, read_split, seeded_order
from mlpmem.corpora.wikipedia import cut_point, load_wikipedia_articles, prepare_wikipedia
from mlpmem.corpora.wikitext import clean_wikitext

__all__ = [
    "CORPORA",
    "FORMAT_VERSION",
    "SPLITS",
    "article_id",
    "clean_wikitext",
    "cut_point",
    "download_shakespeare",
    "load_wikipedia_articles",
    "prepare",
    "prepare_shakespeare",
    "prepare_wikipedia",
    "read_shakespeare_archive",
    "read_split",
    "seeded_order",
]
