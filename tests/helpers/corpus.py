"""Small deterministic documents: shuffled sentences of one paragraph, as strings or as a folder of text files."""

from __future__ import annotations

import random
from pathlib import Path

TEXT = (
    "The old lighthouse keeper walked along the shore every morning. He counted the gulls and the boats, "
    "and wrote their numbers in a small green book. When the storm came in November, the boats stayed "
    "home and the gulls flew inland. The keeper lit the lamp early and watched the waves break on the "
    "rocks below the tower. In spring the fishermen returned, and the keeper began his counting again. "
)


def corpus_text(n_docs: int = 6, seed: int = 0) -> list[str]:
    """Small documents made of shuffled sentences of TEXT (deterministic)."""
    sentences = [s.strip() + "." for s in TEXT.split(".") if s.strip()]
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        picked = [rng.choice(sentences) for _ in range(rng.randint(6, 12))]
        docs.append(" ".join(picked))
    return docs


def write_corpus(folder: Path, n_docs: int) -> Path:
    """A folder of ``n_docs`` small text documents (``corpus_text``), one ``doc<i>.txt`` each; returns it."""
    folder.mkdir()
    for i, text in enumerate(corpus_text(n_docs)):
        (folder / f"doc{i}.txt").write_text(text)
    return folder
