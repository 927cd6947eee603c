"""The packed layout of windows: greedy rows in window order, restarting positions, segments, scored positions."""

import numpy as np
import pytest

from mlpmem.corpora.documents import make_windows
from mlpmem.corpora.packing import batch_bounds, pack_layout, packed_rows, scored_index, window_lengths
from mlpmem.errors import ConfigError


def test_first_fit_layout_in_window_order_within_capacity():
    layout = pack_layout(np.array([5, 4, 3, 8, 2, 8, 1]), capacity=10)
    assert layout.row.tolist() == [0, 0, 1, 2, 1, 3, 0]  # a later window fills the first row with room
    assert layout.col.tolist() == [0, 5, 0, 0, 3, 0, 9]
    assert layout.num_rows == 4 and layout.width == 10
    for r in range(layout.num_rows):
        assert layout.length[layout.row == r].sum() <= 10
    with pytest.raises(ConfigError, match="does not fit"):
        pack_layout(np.array([3, 11]), capacity=10)


def test_unpacked_layout_is_one_window_per_row():
    layout = pack_layout(np.array([5, 4, 3]), capacity=None)
    assert layout.row.tolist() == [0, 1, 2] and layout.col.tolist() == [0, 0, 0] and layout.width == 5


@pytest.mark.parametrize("capacity", [None, 10, 24])
def test_batches_are_consecutive_and_fill_at_most_the_rows(capacity):
    lengths = np.array([5, 4, 3, 8, 2, 8, 1, 9, 9])
    bounds = batch_bounds(lengths, rows_per_batch=2, capacity=capacity)
    assert bounds[0].start == 0 and bounds[-1].stop == len(lengths)
    assert all(a.stop == b.start for a, b in zip(bounds, bounds[1:]))
    for b in bounds:
        assert pack_layout(lengths[b], capacity).num_rows <= 2
    for b in bounds[:-1]:  # each batch is as long as it can be
        assert pack_layout(lengths[b.start : b.stop + 1], capacity).num_rows > 2
    if capacity is None:
        assert [b.stop - b.start for b in bounds] == [2, 2, 2, 2, 1]


def test_rows_hold_each_window_with_its_own_positions_and_segment():
    docs = [np.arange(100, 105), np.arange(200, 230), np.arange(300, 303)]
    windows = make_windows([len(d) for d in docs], 8, 4)
    layout = pack_layout(window_lengths(windows), capacity=8)
    rows = packed_rows(docs, windows, layout, pad_id=0)
    assert rows.input_ids.shape == (layout.num_rows, 8)
    for i, w in enumerate(windows):
        r, c, n = layout.row[i], layout.col[i], w.end - w.start
        assert rows.input_ids[r, c : c + n].tolist() == docs[w.doc][w.start : w.end].tolist()
        assert rows.position_ids[r, c : c + n].tolist() == list(range(n))
        assert (rows.segments[r, c : c + n] == i + 1).all()
    used = sum(w.end - w.start for w in windows)
    assert (rows.segments == 0).sum() == rows.segments.size - used  # the rest is padding
    assert (rows.input_ids[rows.segments == 0] == 0).all()


def test_scored_positions_follow_window_order():
    docs = [np.arange(5), np.arange(30), np.arange(3), np.arange(2)]
    windows = make_windows([len(d) for d in docs], 8, 4)
    layout = pack_layout(window_lengths(windows), capacity=8)
    rows = packed_rows(docs, windows, layout)
    r, c = scored_index(windows, layout)
    targets = np.concatenate([docs[w.doc][w.first_target : w.end] for w in windows])
    assert len(r) == len(targets) == sum(len(d) - 1 for d in docs)
    # each scored position holds the token before its target, of the same window
    inputs = np.concatenate([docs[w.doc][w.first_target - 1 : w.end - 1] for w in windows])
    assert rows.input_ids[r, c].tolist() == inputs.tolist()
    assert layout.num_rows < len(windows)  # some rows hold several windows
