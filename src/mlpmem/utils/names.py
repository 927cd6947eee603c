"""The comma-separated names a user gives on a command line (``--docs``, ``--tasks``, ``--names``...), taken exactly.

A name is never split further, trimmed or merged with another: a list whose items would be (an empty one, one with
a space at either end, one given twice) is refused in one line instead.
"""

from __future__ import annotations

from mlpmem.errors import ConfigError


def name_list(text: str, option: str, what: str) -> list[str]:
    """The names of ``text`` (``option``'s value, a comma-separated list of ``what``), each exactly as given."""
    if not text.strip():
        raise ConfigError(f"{option} is empty: give comma-separated {what}")
    items = text.split(",")
    if not all(item.strip() for item in items):
        raise ConfigError(f"{option} {text!r} holds an empty name (two commas, or one at an end)")
    padded = [item for item in items if item != item.strip()]
    if padded:
        raise ConfigError(f"{option} {text!r}: the name {padded[0]!r} has a space at an end; names are taken exactly: "
                          "write the list without spaces around the commas")
    twice = [item for i, item in enumerate(items) if item in items[:i]]
    if twice:
        raise ConfigError(f"{option} {text!r} names {twice[0]!r} twice: give each once")
    return items
