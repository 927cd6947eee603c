"""Figures of the reports: matplotlib drawn off-screen."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` with the non-interactive Agg backend (reports are written on machines without a
    display); imported on first use, since matplotlib is slow to import and most commands draw nothing."""
    import matplotlib  # local: slow to import, and most commands draw nothing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
