"""The run's early checks: everything the backbone and the configuration can tell before any work.

:func:`preflight` runs before the run folder holds a file and before key extraction, so a run that cannot
finish stops in seconds: the backbone loads, its tokenizer has what the corpus needs, the key layer and site
exist and give keys of the backbone's width, and the memory can be built for it (its blocks, a mirrored
``init``, a tied head).
"""

from __future__ import annotations

import torch

from mlpmem.backbone import extract_keys, resolve_layer
from mlpmem.corpora.documents import doc_start_token
from mlpmem.errors import ConfigError, MlpmemError
from mlpmem.memory import MLPMemory, size_for_backbone
from mlpmem.memory.sizing import family, key_width
from mlpmem.pipeline.run import Run


def preflight(run: Run) -> None:
    """Raise a one-line error if this run's backbone, tokenizer, key layer / site or memory cannot work together."""
    model, tokenizer = run.backbone
    check_tokenizer(model, tokenizer)
    check_keys(model, run.cfg.backbone.layer, run.cfg.backbone.site, doc_start_token(tokenizer))
    check_memory(run)


def check_tokenizer(model, tokenizer) -> None:
    """The tokenizer marks documents (a separator, BOS or EOS token) and its ids fit the backbone's vocabulary."""
    doc_start_token(tokenizer)
    vocab = model.get_output_embeddings()
    if vocab is None:
        raise ConfigError(f"the {family(model)} backbone has no output embedding: it is not a causal LM")
    ids = max(tokenizer.get_vocab().values(), default=-1) + 1
    if ids > vocab.weight.shape[0]:
        raise ConfigError(f"the tokenizer's ids reach {ids - 1} but the {family(model)} backbone's vocabulary has "
                          f"{vocab.weight.shape[0]} tokens: they do not belong together")


def check_keys(model, layer: int | float, site: str, token: int) -> None:
    """The key layer exists and a two-token forward captures keys of the backbone's width there."""
    index = resolve_layer(model, layer)
    try:
        keys = extract_keys(model, torch.tensor([[token, token]]), layer=index, site=site)  # (1, 2, d)
    except MlpmemError as exc:
        raise ConfigError(f"no {site} keys at layer {index} of the {family(model)} backbone: {exc}") from None
    if keys is None or keys.shape[-1] != key_width(model):
        width = None if keys is None else keys.shape[-1]
        raise ConfigError(f"the {site} keys at layer {index} of the {family(model)} backbone are {width} wide, not "
                          f"its embedding's {key_width(model)}: a memory cannot read them")


def check_memory(run: Run) -> None:
    """The ``memory:`` section sized for this backbone builds (shapes only), and its head can be tied."""
    model, tokenizer = run.backbone
    config = size_for_backbone(run.cfg.memory, model, tokenizer, run.cfg.backbone.layer, run.cfg.backbone.site)
    with torch.device("meta"):
        MLPMemory(config)
    head = tuple(model.get_output_embeddings().weight.shape)
    if config.tie_head and head != (config.vocab_size, config.width):
        raise ConfigError(f"memory.tie_head needs a memory {config.width} wide over {config.vocab_size} tokens, but "
                          f"the backbone's output embedding is {head}: set memory.tie_head: false or leave "
                          "memory.hidden_size unset")
