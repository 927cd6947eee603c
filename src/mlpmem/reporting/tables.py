"""Markdown tables and the number formats of the reports and benchmarks.

``—`` stands for a value that was not measured.
"""

from __future__ import annotations

DASH = "—"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table; floats are printed with 3 significant digits (strings and ints as given)."""

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def fixed(x: float | None, digits: int = 1) -> str:
    """``x`` with ``digits`` decimals and thousands separators; ``—`` for None."""
    return DASH if x is None else f"{x:,.{digits}f}"


def count(n: int | None) -> str:
    """An integer with thousands separators; ``—`` for None."""
    return DASH if n is None else f"{n:,}"


def number(x: float | int | None, digits: int = 1) -> str:
    """A float as :func:`fixed`, anything else as :func:`count`."""
    return fixed(x, digits) if isinstance(x, float) else count(x)


def mebibytes(n: int) -> str:
    """A byte count in MiB with one decimal, labelled ``MB``."""
    return f"{n / 2**20:,.1f} MB"
