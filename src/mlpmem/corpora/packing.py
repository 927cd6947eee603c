"""Packing: several windows side by side in one model row, each one seeing only its own tokens.

A corpus of short documents (a fact, a sentence) gives windows much shorter than ``block_size``; one window
per row makes every forward small, so per-call overhead dominates key extraction. Packing lays consecutive
windows next to each other in rows of at most ``capacity`` tokens. Each window keeps its own tokens, position
ids that restart at 0 and a *segment* id; the backbone attends only within a segment (causally), so a window's
keys are the keys it gets alone in its own row, up to the floating-point rounding of other matrix shapes.

The layout is greedy first-fit in window order: a window goes to the first row of its batch with room for it,
else opens a new row, and a batch ends where a window fits none of its ``rows_per_batch`` rows. So a batch holds a
contiguous range of windows (shared out among its rows), and reading the scored positions window by window gives
the datastore's rows in the very same order as one window per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlpmem.corpora.documents import Window
from mlpmem.errors import ConfigError


@dataclass(frozen=True)
class Layout:
    """Where each window of a batch sits: window ``i`` fills row ``row[i]``, columns ``col[i]:col[i]+length[i]``."""

    row: np.ndarray  # (W,) int64
    col: np.ndarray  # (W,) int64
    length: np.ndarray  # (W,) int64

    @property
    def num_rows(self) -> int:
        return int(self.row.max()) + 1 if len(self.row) else 0

    @property
    def width(self) -> int:
        """Columns of the widest row (the batch's ``T``)."""
        return int((self.col + self.length).max()) if len(self.row) else 0


def window_lengths(windows: Sequence[Window]) -> np.ndarray:
    """Input tokens ``end - start`` of each window, ``(W,)`` int64."""
    rows = getattr(windows, "rows", None)  # a compact ``Windows``: no Python objects
    if rows is not None:
        return (rows[:, 2] - rows[:, 1]).astype(np.int64)
    return np.asarray([w.end - w.start for w in windows], dtype=np.int64)


def _first_fit(lengths: np.ndarray, capacity: int, max_rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(row, col)`` of the longest prefix of ``lengths`` that first-fit places in at most ``max_rows`` rows."""
    row, col, used = [], [], []  # used[r]: tokens already in row r
    for n in lengths:
        r = next((r for r, u in enumerate(used) if u + n <= capacity), len(used))
        if r == len(used):
            if max_rows is not None and r == max_rows:
                break
            used.append(0)
        row.append(r)
        col.append(used[r])
        used[r] += int(n)
    return np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)


def pack_layout(lengths: np.ndarray, capacity: int | None) -> Layout:
    """First-fit layout of windows of ``lengths`` in rows of at most ``capacity`` tokens (``None``: one per row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if capacity is None:
        return Layout(np.arange(len(lengths)), np.zeros(len(lengths), dtype=np.int64), lengths)
    if len(lengths) and lengths.max() > capacity:
        raise ConfigError(f"a window of {lengths.max()} tokens does not fit a packed row of {capacity}")
    row, col = _first_fit(lengths, capacity, None)
    return Layout(row, col, lengths)


def batch_bounds(lengths: np.ndarray, rows_per_batch: int, capacity: int | None) -> list[slice]:
    """Consecutive window slices whose layout (:func:`pack_layout`) fills at most ``rows_per_batch`` rows each."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if rows_per_batch < 1:
        raise ConfigError(f"a batch needs at least one row, got {rows_per_batch}")
    if capacity is None:
        return [slice(s, min(s + rows_per_batch, len(lengths))) for s in range(0, len(lengths), rows_per_batch)]
    pack_layout(lengths, capacity)  # every window fits a row
    bounds, start = [], 0
    while start < len(lengths):
        placed = len(_first_fit(lengths[start:], capacity, rows_per_batch)[0])
        bounds.append(slice(start, start + placed))
        start += placed
    return bounds


@dataclass(frozen=True)
class PackedRows:
    """Model inputs of a packed batch, ``(R, T)`` int64 each; padding has segment 0 and position 0."""

    input_ids: np.ndarray
    position_ids: np.ndarray
    segments: np.ndarray  # window index within the batch + 1; 0 = padding


def packed_rows(token_docs: Sequence[np.ndarray], windows: Sequence[Window], layout: Layout,
                pad_id: int = 0) -> PackedRows:
    """Token ids, restarting position ids and segment ids of ``windows`` laid out by ``layout``."""
    shape = (layout.num_rows, layout.width)
    input_ids = np.full(shape, pad_id, dtype=np.int64)
    position_ids = np.zeros(shape, dtype=np.int64)
    segments = np.zeros(shape, dtype=np.int64)
    for i, w in enumerate(windows):
        r, c, n = layout.row[i], layout.col[i], layout.length[i]
        input_ids[r, c : c + n] = token_docs[w.doc][w.start : w.end]
        position_ids[r, c : c + n] = np.arange(n)
        segments[r, c : c + n] = i + 1
    return PackedRows(input_ids, position_ids, segments)


def scored_index(windows: Sequence[Window], layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``, ``(M,)`` each: the positions whose next token is a scored target, window by window
    (the order of the datastore's rows)."""
    rows, cols = [], []
    for i, w in enumerate(windows):
        first = layout.col[i] + w.first_target - w.start - 1
        cols.append(np.arange(first, first + w.num_scored))
        rows.append(np.full(w.num_scored, layout.row[i]))
    return np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64)
