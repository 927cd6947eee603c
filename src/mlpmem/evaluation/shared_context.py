"""Log-likelihoods with each context run once: the requests of a multiple-choice item share their context.

lm-eval's ``HFLM`` scores every (context, continuation) pair as one sequence, so an item with four choices runs
its context four times (eight with domain-conditional PMI's unconditional requests, which all share one short
context). Here the requests are grouped by their context tokens; each group's context runs once with the KV
cache kept (only its last position's distribution is computed: it predicts every continuation's first token),
and the group's continuations then run together on copies of that cache, right-padded (a causal model's real
positions never attend to the padding after them); a request repeated in a group (the unconditional requests of
PMI repeat a task's fixed choices) runs once. The sums and greedy flags equal ``HFLM``'s up to float
rounding: the same positions are computed, in other matmul shapes. Groups of one request gain nothing and are
left to ``HFLM``'s own batched path, as are requests whose context must be truncated to fit the model.

The forward may also return several methods' log-probs of one pass, stacked in a leading dimension (M, B, T, V)
(:mod:`mlpmem.evaluation.one_pass`): every score is then a list of M ``(Σ log p, greedy)``, one per method.

Running a context once pays only when it is long against what it saves: each group costs two batch-1 forwards,
and on a CPU a forward of a few tokens costs about as much as one of a hundred (every weight is read either
way). :func:`worth_sharing` says which groups save enough; the others are scored as whole rows
(:func:`whole_rows_loglikelihood`): each distinct ``context + continuation[:-1]`` once (the choices of a
judgement that are one token each read one row), rows of similar length left-padded into batches of up to
:data:`ROW_TOKENS` tokens, only the continuations' positions turned into log-probs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mlpmem.compute import model_device

Forward = Callable[..., tuple[torch.Tensor, object]]
"""``forward(input_ids, past, last_only) -> (logits (B, T, V) or (M, B, T, V), cache)``: the model in its mixing
context, or M methods' log-probs from one pass."""
RowsForward = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
"""``forward_rows(input_ids, attention_mask, keep) -> logits (B, keep, V) or (M, B, keep, V)`` of the last ``keep``
positions of left-padded rows (positions counted from the mask)."""
ROW_TOKENS = 2048
"""Tokens a batch holds: enough rows of a few tokens that one forward's fixed cost is shared, a long row alone
(batching long rows gains nothing on a CPU)."""
Score = tuple[float, bool] | list[tuple[float, bool]]
"""A request's (Σ log p, greedy), or one per method when the forward returns several."""


def forward_on_cache(model, ids: torch.Tensor, past, last_only: bool):
    """``model``'s output on ``ids`` after ``past`` (its KV cache, None to start), the cache kept and only the last
    position's logits computed with ``last_only``: the call every :data:`Forward` makes."""
    keep = 1 if last_only else 0
    return model(input_ids=ids.to(model_device(model)), cache=past, use_cache=True, logits_to_keep=keep)


@dataclass(frozen=True)
class Group:
    """The requests (indices into the caller's list) that share ``context``."""

    context: tuple[int, ...]
    members: tuple[int, ...]


def shared_groups(requests: Sequence[tuple], max_length: int | None,
                  min_members: int = 2) -> tuple[list[Group], list[int]]:
    """``requests`` (lm-eval's ``(request_str, context_enc, continuation_enc)``) split into groups of at least
    ``min_members`` sharing a context, and the indices left to the plain path (alone with their context, or too
    long to fit ``max_length``; None: no limit)."""
    by_context: dict[tuple[int, ...], list[int]] = {}
    rest = []
    for i, (_, context, continuation) in enumerate(requests):
        if max_length is not None and len(context) + len(continuation) > max_length + 1:
            rest.append(i)  # truncated from the left by HFLM: not a shared prefix any more
        else:
            by_context.setdefault(tuple(context), []).append(i)
    groups = []
    for context, members in by_context.items():
        if len(members) >= min_members:
            groups.append(Group(context, tuple(members)))
        else:
            rest.extend(members)
    return groups, sorted(rest)


def _scores(logp: torch.Tensor, continuation: list[int]) -> Score:
    """Σ log p of ``continuation`` and whether it is the greedy path, from its positions' log-probs (T, V), or
    one pair per method from (M, T, V)."""
    target = torch.tensor(continuation, device=logp.device)
    if logp.dim() == 3:
        return [_scores(one, continuation) for one in logp]
    greedy = bool((logp.argmax(-1) == target).all())
    return float(logp.gather(1, target[:, None]).sum()), greedy


def score_group(forward: Forward, group: Group, continuations: list[list[int]], batch_size: int,
                pad_id: int) -> Iterator[Score]:
    """Every continuation of ``group`` scored after its context, which runs once; yielded in order, as each
    chunk is done (at least ``batch_size`` continuations, up to :data:`ROW_TOKENS` tokens: a group can be large,
    the PMI requests of a task share one context)."""
    ids = torch.tensor([group.context])
    logits, cache = forward(ids, None, last_only=True)
    first = F.log_softmax(logits[..., 0, -1, :].float(), -1)  # (V) or (M, V): every continuation's first token
    width = len(group.context) + max(len(c) for c in continuations)
    size = max(batch_size, ROW_TOKENS // width)  # short continuations of a short context: many a batch
    for start in range(0, len(continuations), size):
        chunk = continuations[start:start + size]
        rest = [c[:-1] for c in chunk]  # what each continuation feeds after the context
        width = max(len(r) for r in rest)
        tails = None
        if width:
            batch = torch.tensor([r + [pad_id] * (width - len(r)) for r in rest])
            last = start + size >= len(continuations)
            past = cache if last else copy.deepcopy(cache)  # the last chunk consumes the context's own cache
            past.batch_repeat_interleave(len(chunk))
            tails = F.log_softmax(forward(batch, past, last_only=False)[0].float(), -1)
        for row, continuation in enumerate(chunk):
            n = len(continuation) - 1
            head = first[..., None, :]  # (1, V) or (M, 1, V)
            logp = torch.cat([head, tails[..., row, :n, :]], dim=-2) if n else head
            yield _scores(logp, continuation)


def shared_context_loglikelihood(forward: Forward, requests: Sequence[tuple], groups: list[Group], batch_size: int,
                                 pad_id: int, progress: bool = True) -> dict[int, Score]:
    """``{request index: (Σ log p, greedy)}`` of every request in ``groups`` (a list of them per method when the
    forward returns several methods' log-probs)."""
    results: dict[int, Score] = {}
    bar = tqdm(total=sum(len(g.members) for g in groups), disable=not progress,
               desc="Running loglikelihood requests (shared contexts)")
    with torch.no_grad():
        for group in groups:
            same: dict[tuple[int, ...], list[int]] = {}  # a repeated request (PMI's unconditional ones) runs once
            for i in group.members:
                same.setdefault(tuple(requests[i][2]), []).append(i)
            continuations = [list(c) for c in same]
            for members, scored in zip(same.values(), score_group(forward, group, continuations, batch_size, pad_id)):
                results.update((i, scored) for i in members)
                bar.update(len(members))
    bar.close()
    return results


def worth_sharing(group: Group, requests: Sequence[tuple], min_saved: int) -> bool:
    """Whether running ``group``'s context once saves at least ``min_saved`` tokens over scoring its distinct rows
    whole (the rows that differ only in a continuation's last token are one row)."""
    rows = {tuple(requests[i][2][:-1]) for i in group.members}
    return (len(rows) - 1) * len(group.context) >= min_saved


def whole_rows_loglikelihood(forward_rows: RowsForward, requests: Sequence[tuple], indices: Sequence[int],
                             pad_id: int, progress: bool = True) -> dict[int, Score]:
    """``{request index: (Σ log p, greedy)}`` of ``requests[indices]``, each scored on its row
    ``context + continuation[:-1]`` (one run per distinct row; see the module docstring)."""
    readers: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        _, context, continuation = requests[i]
        readers.setdefault(tuple(context) + tuple(continuation[:-1]), []).append(i)
    rows = sorted(readers, key=len, reverse=True)  # similar lengths share a batch; the longest first
    results: dict[int, Score] = {}
    bar = tqdm(total=len(indices), disable=not progress, desc="Running loglikelihood requests (whole rows)")
    start = 0
    with torch.no_grad():
        while start < len(rows):
            size = max(1, ROW_TOKENS // len(rows[start]))
            chunk = rows[start:start + size]
            start += len(chunk)
            width = len(chunk[0])
            keep = max(len(requests[i][2]) for row in chunk for i in readers[row])
            ids = torch.tensor([[pad_id] * (width - len(row)) + list(row) for row in chunk])
            mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in chunk])
            logp = F.log_softmax(forward_rows(ids, mask, keep).float(), -1)  # (B, keep, V) or (M, B, keep, V)
            for b, row in enumerate(chunk):
                for i in readers[row]:
                    continuation = requests[i][2]
                    results[i] = _scores(logp[..., b, keep - len(continuation):, :], continuation)
                bar.update(len(readers[row]))
    bar.close()
    return results
