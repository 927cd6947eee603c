"""A stand-in sentence encoder for the dense retriever, so no test downloads an embedding model."""

from __future__ import annotations

import torch


class BagOfWordsEncoder:
    """A stand-in sentence encoder: normalized word-hash counts (no model download in tests)."""

    def encode(self, texts, **kwargs):
        out = torch.zeros(len(texts), 64)
        for i, t in enumerate(texts):
            for w in t.lower().replace(".", " ").replace("?", " ").split():
                out[i, sum(map(ord, w)) % 64] += 1
        return torch.nn.functional.normalize(out, dim=1)
