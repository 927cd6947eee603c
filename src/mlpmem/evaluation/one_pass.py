"""Several methods of one run scored by lm-eval from ONE backbone pass per request.

The backbone, the memory (at a fixed λ or with a gate) and kNN-LM all read the same backbone forward: its logits,
and its hidden state at the run's key layer and site (the datastore's keys, which the memory was trained on). So
instead of one backbone pass per method, :class:`OnePass` runs the backbone once with a
:class:`~mlpmem.backbone.KeyHook` and hands the logits and keys to every method's own mixing
(``mixer.mix(lm_logits, keys)``: :meth:`MemoryAugmentedForCausalLM.mix
<mlpmem.inference.hf_model.MemoryAugmentedForCausalLM.mix>`, :meth:`KnnLMDecoder.mix
<mlpmem.baselines.knnlm.KnnLMDecoder.mix>`; the backbone's own log-softmax), through the paths of
:mod:`mlpmem.evaluation.shared_context`: a long context shared by several continuations runs once, every
continuation on its cache; every other request is scored on its whole row, many rows a batch.

lm-eval scores one model at a time, so each method gets its own :class:`OnePassLM` (lm-eval's ``HFLM`` on the
shared backbone), and they share one :class:`OnePass`: the first method asked for a request scores it for every
method; the others find the answer (lm-eval builds the same requests for the same tasks and settings). A request
whose context must be truncated to fit is scored on the truncated context, as ``HFLM`` does. Only
loglikelihood requests are shared; loglikelihood_rolling and generate_until are refused (one-line error): score
those with the ``mlpmem`` model type.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from lm_eval.models.huggingface import HFLM
from lm_eval.utils import simple_parse_args_string
from torch import nn

from mlpmem.backbone import KeyHook, keep_positions
from mlpmem.compute import autocast, inference_scope, model_device
from mlpmem.errors import ConfigError
from mlpmem.evaluation.methods import MethodArgs, build_model
from mlpmem.evaluation.shared_context import (
    forward_on_cache,
    shared_context_loglikelihood,
    shared_groups,
    whole_rows_loglikelihood,
    worth_sharing,
)
from mlpmem.pipeline.hf_export import open_run

ONE_PASS_METHODS = ("backbone", "memory", "knnlm")
"""The ``method=`` values whose scores come from the run's backbone pass (with its keys) alone."""

SHARE_MIN_SAVED = 128
"""Tokens a context run once must save to be shared (:func:`~mlpmem.evaluation.shared_context.worth_sharing`):
about the fixed cost of the two batch-1 forwards that sharing it takes."""

Mix = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``mix(lm_logits (B, T, V), keys (B, T, d)) -> log-probs (B, T, V)`` of one method."""


def _backbone_log_probs(lm_logits: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(lm_logits.float(), dim=-1)


def _key_site(mixer) -> tuple[int, str]:
    """The layer and site of the keys ``mixer`` reads (a memory's or a kNN-LM datastore's)."""
    if hasattr(mixer, "key_layer"):
        return mixer.key_layer, mixer.key_site
    return mixer.layer, mixer.site


class OnePass:
    """The methods ``{label: model_args}`` of ONE run, scored together (see the module docstring).

    ``model_args`` are the ``mlpmem`` model type's (a string as lm-eval takes it, or a dict): each must name the
    same ``run=``, a method of :data:`ONE_PASS_METHODS` and the same ``precision=`` (the pass and every mixing
    run at it). ``scores`` is filled as requests are scored. ``min_saved``: what a shared context must save
    (:data:`SHARE_MIN_SAVED`; 0 shares every context that has two distinct rows).
    """

    def __init__(self, methods: dict[str, str | dict], min_saved: int = SHARE_MIN_SAVED):
        if not methods:
            raise ConfigError("one pass needs at least one method")
        args = {label: MethodArgs(**(simple_parse_args_string(a) if isinstance(a, str) else a))
                for label, a in methods.items()}
        runs = {a.run for a in args.values()}
        if len(runs) != 1 or None in runs:
            raise ConfigError(f"one pass scores the methods of one run= folder, got {sorted(map(str, runs))}")
        bad = [label for label, a in args.items() if a.method not in ONE_PASS_METHODS]
        if bad:
            raise ConfigError(f"method(s) {bad} cannot share the backbone pass (only {list(ONE_PASS_METHODS)})")
        precisions = {a.precision for a in args.values()}
        if len(precisions) != 1:
            raise ConfigError(f"one pass runs at one precision, the methods ask for {sorted(precisions)}")
        self.precision = precisions.pop()
        self.min_saved = min_saved
        self.run = open_run(runs.pop())
        self.args = args
        self.labels = list(args)
        self.backbone, self.tokenizer = self.run.backbone
        self.mix: dict[str, Mix] = {}
        self.lams: dict[str, float | None] = {}
        sites = set()
        self.modules: list[nn.Module] = []  # the mixers' own weights, run under the pass's inference scope too
        for label, a in args.items():
            loaded = build_model(a, self.run)  # on the run's one backbone
            self.mix[label] = _backbone_log_probs if loaded.mixer is None else loaded.mixer.mix
            self.lams[label] = loaded.lam
            if loaded.mixer is not None:
                sites.add(_key_site(loaded.mixer))
            if isinstance(loaded.mixer, nn.Module):
                self.modules.append(loaded.mixer)
        if len(sites) > 1:
            raise ConfigError(f"the methods read keys of different layers or sites {sorted(sites)}: no one pass")
        self.key_site = sites.pop() if sites else None
        self.scores: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[float, bool]]] = {}
        self.passes = 0  # backbone forwards run (contexts and continuation batches)

    def forward(self, ids: torch.Tensor, past, last_only: bool) -> tuple[torch.Tensor, object]:
        """Every method's log-probs (M, B, T, V) of one backbone forward on ``ids`` after ``past``."""
        return self._mixed(lambda: forward_on_cache(self.backbone, ids, past, last_only), 1 if last_only else 0)

    def forward_rows(self, ids: torch.Tensor, mask: torch.Tensor, keep: int) -> torch.Tensor:
        """Every method's log-probs (M, B, keep, V) of the last ``keep`` positions of left-padded rows."""
        device = model_device(self.backbone)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return self._mixed(lambda: self.backbone(input_ids=ids.to(device), attention_mask=mask.to(device),
                                                 position_ids=positions.to(device), use_cache=False,
                                                 logits_to_keep=keep), keep)[0]

    def _mixed(self, run, keep: int) -> tuple[torch.Tensor, object]:
        """Every method's mixing of the backbone output ``run()`` returns (its logits at the kept positions)."""
        hook = None if self.key_site is None else KeyHook(self.backbone, *self.key_site)
        with torch.no_grad(), autocast(self.backbone, self.precision):
            with hook or contextlib.nullcontext():
                out = run()
            keys = None if hook is None else keep_positions(hook.keys, out.logits, keep)
            mixed = [self.mix[label](out.logits, keys).float() for label in self.labels]
        self.passes += 1
        return torch.stack(mixed), getattr(out, "cache", None)

    def score(self, requests: Sequence[tuple], max_length: int, batch_size: int, progress: bool) -> None:
        """Score every request (lm-eval's ``(request_str, context_enc, continuation_enc)``) not yet scored."""
        todo, seen = [], set()
        for _, context, continuation in requests:
            key = fitted(context, continuation, max_length)
            if key not in self.scores and key not in seen:
                seen.add(key)
                todo.append((None, *key))
        if not todo:
            return
        groups, rest = shared_groups(todo, max_length, min_members=1)
        assert not rest, "every request was fitted to max_length"
        share = [worth_sharing(g, todo, self.min_saved) for g in groups]
        shared = [g for g, s in zip(groups, share) if s]
        whole = sorted(i for g, s in zip(groups, share) if not s for i in g.members)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with inference_scope(self.backbone, self.precision, *self.modules):  # each weight cast once for all requests
            scored = shared_context_loglikelihood(self.forward, todo, shared, batch_size, pad_id, progress=progress)
            scored |= whole_rows_loglikelihood(self.forward_rows, todo, whole, pad_id, progress=progress)
        for i, per_method in scored.items():
            self.scores[(todo[i][1], todo[i][2])] = per_method

    def models(self, batch_size: int = 8) -> dict[str, OnePassLM]:
        """An lm-eval model per method, all answering from this pass."""
        return {label: OnePassLM(self, label, batch_size=batch_size) for label in self.labels}

    def answer(self, label: str, request: tuple, max_length: int) -> tuple[float, bool]:
        _, context, continuation = request
        return self.scores[fitted(context, continuation, max_length)][self.labels.index(label)]


def fitted(context: Sequence[int], continuation: Sequence[int], max_length: int
           ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (context, continuation) ``HFLM`` scores: a context cut from the left so that both fit in
    ``max_length + 1`` tokens (the model sees all but the last)."""
    if len(continuation) > max_length:
        raise ConfigError(f"a continuation of {len(continuation)} tokens does not fit the model's "
                          f"{max_length}-token window")
    room = max_length + 1 - len(continuation)
    return tuple(context[-room:] if len(context) > room else context), tuple(continuation)


class OnePassLM(HFLM):
    """lm-eval's ``HFLM`` answering as method ``label`` of a :class:`OnePass` (loglikelihood requests only)."""

    def __init__(self, one_pass: OnePass, label: str, batch_size: int = 8, **kwargs):
        if label not in one_pass.labels:
            raise ConfigError(f"{label!r} is not among the one pass's methods {one_pass.labels}")
        kwargs.setdefault("backend", "causal")
        super().__init__(pretrained=one_pass.backbone, tokenizer=one_pass.tokenizer, batch_size=batch_size,
                         **kwargs)
        self.one_pass, self.label = one_pass, label

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        batch_size = override_bs or (self.batch_size if isinstance(self.batch_size, int) else 8)
        self.one_pass.score(requests, self.max_length, batch_size, progress=not disable_tqdm and self.rank == 0)
        answers = [self.one_pass.answer(self.label, r, self.max_length) for r in requests]
        for request, answer in zip(requests, answers):
            if request[0] is not None:
                self.cache_hook.add_partial("loglikelihood", request[0], answer)
        return answers

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise ConfigError("one pass scores loglikelihood requests only: score rolling log-likelihoods with the "
                          "mlpmem model type")

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise ConfigError("one pass scores loglikelihood requests only: generate with the mlpmem model type")

    def get_model_info(self) -> dict:
        """What was evaluated, as the ``mlpmem`` model type records it, and the methods scored with it."""
        one, label = self.one_pass, self.label
        lam = {} if one.lams[label] is None else {"lam": one.lams[label]}
        return {"model_num_parameters": sum(p.numel() for p in one.backbone.parameters()),
                "model_dtype": str(one.backbone.dtype),
                "mlpmem": {**one.args[label].source(), **lam, "one_pass": one.labels}}
