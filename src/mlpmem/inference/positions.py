"""How many positions a backbone reads, and the check that a prompt and what is generated after it fit in them.

A model with learned position embeddings (GPT-2's ``n_positions``) fails with an index error past its last
position, and any model's output past its trained context is not what it was trained to give: a prompt and its
continuation longer than the backbone's positions are refused in one line before the backbone runs.
"""

from __future__ import annotations

from mlpmem.errors import ConfigError

NAMES = ("max_position_embeddings", "n_positions", "n_ctx")


def context_length(config) -> int | None:
    """The number of positions a model's config gives (None: it gives none)."""
    for name in NAMES:
        if getattr(config, name, None) is not None:
            return int(getattr(config, name))
    return None


def check_positions(config, prompt_tokens: int, new_tokens: int = 0) -> None:
    """Refuse a prompt of ``prompt_tokens`` followed by ``new_tokens`` generated ones that would not fit in the
    positions of the model configured by ``config``."""
    limit = context_length(config)
    total = prompt_tokens + new_tokens
    if limit is None or total <= limit:
        return
    name = next(n for n in NAMES if getattr(config, n, None) is not None)
    more = f" and {new_tokens} more to generate" if new_tokens else ""
    raise ConfigError(f"the prompt is {prompt_tokens} tokens{more}: {total} positions, more than the backbone's "
                      f"{limit} ({name}): shorten the prompt" + (" or generate fewer tokens" if new_tokens else ""))
