"""Multiple-choice requests that share a context run it once: the scores equal lm-eval's own path.

The grouping (shared contexts, singletons and over-long requests left to ``HFLM``), and on a finished tiny run a
multiple-choice task with accuracy and domain-conditional PMI (whose unconditional requests all share one
context) scored with ``share_context`` on and off for the memory, its gate, the backbone, kNN-LM and RAG: every
request's log-likelihood and greedy flag agree, and each shared context runs once.
"""

from __future__ import annotations

import json
import math

import pytest

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import MC_ITEMS as ITEMS
from helpers.harness import mc_responses as responses
from helpers.harness import write_mc_task
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import MlpmemLM
from mlpmem.evaluation.shared_context import (
    Group,
    shared_context_loglikelihood,
    shared_groups,
    whole_rows_loglikelihood,
    worth_sharing,
)
from mlpmem.inference.gate import Gate, GateConfig
from mlpmem.inference.gate_io import save_gate
from mlpmem.pipeline.hf_export import augmented_from_run

# fixture ``run_dir`` (a finished tiny run): tests/evaluation/conftest.py

@pytest.fixture(scope="module")
def mc_tasks(tmp_path_factory):
    return write_mc_task(tmp_path_factory.mktemp("mc-tasks"))


def test_groups_share_a_context_and_leave_singletons_and_truncated_requests():
    requests = [(None, [1, 2], [3]), (None, [1, 2], [4, 5]), (None, [7], [8]), (None, [1, 2], [9] * 9),
                (None, [6], [1]), (None, [6], [2])]
    groups, rest = shared_groups(requests, max_length=9)
    assert [(g.context, g.members) for g in groups] == [((1, 2), (0, 1)), ((6,), (4, 5))]
    assert rest == [2, 3]  # alone with its context; 2 + 9 tokens > max_length + 1 (HFLM truncates it)


def test_a_repeated_request_runs_once_and_every_copy_gets_its_score():
    """PMI's unconditional requests repeat a task's fixed choices under one context: each distinct one runs once."""
    import torch

    fed = []

    class Cache:
        def batch_repeat_interleave(self, n):
            pass

    def forward(ids, past, last_only):
        logits = torch.nn.functional.one_hot(ids % 10, 10).float() * 3 + torch.arange(10) / 10  # (B, T, 10)
        if not last_only:
            fed.extend(tuple(row) for row in ids.tolist())
        return (logits[:, -1:] if last_only else logits), Cache()

    requests = [(None, [1, 2], [3, 4]), (None, [1, 2], [5, 6]), (None, [1, 2], [3, 4]), (None, [1, 2], [2])]
    groups, _ = shared_groups(requests, max_length=9)
    scored = shared_context_loglikelihood(forward, requests, groups, batch_size=8, pad_id=0, progress=False)
    assert sorted(fed) == [(0,), (3,), (5,)]  # after the context: [3, 4] once, [5, 6], [2] (padding only)
    assert scored[0] == scored[2] and scored[0] != scored[1] and set(scored) == {0, 1, 2, 3}
    assert scored[3][1] is True  # after the context's last token 2, the one-hot forward favours 2: greedy


def counted(lm) -> list:
    """The contexts ``lm`` runs through its cached forward (last position only), recorded."""
    seen, forward = [], lm._cached_forward

    def recording(ids, past, last_only):
        if last_only:
            seen.append(tuple(ids[0].tolist()))
        return forward(ids, past, last_only)

    lm._cached_forward = recording
    return seen


@pytest.fixture()
def gate_dir(run_dir, tmp_path):
    folder = tmp_path / "gate"
    save_gate(Gate(GateConfig(hidden_size=4)), folder, augmented_from_run(run_dir).memory)
    return folder


def test_a_context_is_shared_only_when_running_it_once_saves_enough():
    requests = [(None, [1] * 50, [3]), (None, [1] * 50, [4]), (None, [1] * 50, [5, 6]), (None, [1] * 50, [7, 8])]
    judgement = Group((1,) * 50, (0, 1))  # one-token choices read one row: nothing to save
    reading = Group((1,) * 50, (0, 1, 2, 3))  # three distinct rows: the context runs once instead of three times
    assert not worth_sharing(judgement, requests, 1)
    assert worth_sharing(reading, requests, 100) and not worth_sharing(reading, requests, 101)


def test_whole_rows_run_each_distinct_row_once_left_padded():
    """Rows of several lengths in one batch, left-padded: each request reads its own last positions."""
    import torch

    fed = []

    def forward_rows(ids, mask, keep):  # the next-token logits favour (token + position) % 10
        fed.extend(tuple(t for t, m in zip(row, ms) if m) for row, ms in zip(ids.tolist(), mask.tolist()))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = torch.nn.functional.one_hot((ids + positions) % 10, 10).float() * 3
        return logits[:, -keep:]

    requests = [(None, [1, 2], [3]), (None, [1, 2], [4]), (None, [5], [6, 7]), (None, [1, 2, 3, 4], [5, 6])]
    got = whole_rows_loglikelihood(forward_rows, requests, [0, 1, 2, 3], pad_id=0, progress=False)
    assert sorted(fed) == sorted([(1, 2), (5, 6), (1, 2, 3, 4, 5)])  # the two one-token choices share a row

    def alone(context, continuation):  # each request scored on its own unpadded row
        row = torch.tensor([context + continuation[:-1]])
        logits = forward_rows(row, torch.ones_like(row), len(continuation))[0]
        logp = torch.log_softmax(logits, -1)
        return float(logp.gather(1, torch.tensor(continuation)[:, None]).sum())

    for i, (_, context, continuation) in enumerate(requests):
        assert math.isclose(got[i][0], alone(context, continuation), rel_tol=1e-6)
    assert got[0][1] and not got[1][1]  # padded, [1, 2] still sits at positions 0, 1: (2 + 1) % 10 = 3 is greedy


@pytest.mark.parametrize("method", ["memory", "gate", "backbone", "knnlm", "rag-bm25"])
def test_shared_contexts_score_as_lm_evals_own_path(run_dir, mc_tasks, gate_dir, tmp_path, method):
    args = {"memory": {}, "gate": {"gate": True, "gate_dir": str(gate_dir)}}.get(method, {"method": method})
    if method == "rag-bm25":
        docs = tmp_path / "docs.jsonl"
        docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in
                                ["The keeper walked to the shore.", "Gulls and boats were counted.", "A storm."]))
        args |= {"docs": str(docs), "top_k": 2}
    shared = MlpmemLM(run=str(run_dir), batch_size=2, **args)
    contexts = counted(shared)
    got = responses(shared, mc_tasks)
    expected = responses(MlpmemLM(run=str(run_dir), batch_size=2, share_context=False, **args), mc_tasks)
    assert len(got) == len(expected) == sum(2 * len(i["choices"]) for i in ITEMS)
    for (loglik, greedy), (want, want_greedy) in zip(got, expected):
        assert math.isclose(loglik, want, rel_tol=1e-5, abs_tol=1e-4) and greedy == want_greedy
    assert len(contexts) == len(set(contexts)) == len(ITEMS) + 1  # each item's context, and PMI's shared one


def test_share_context_must_be_a_boolean(run_dir):
    with pytest.raises(ConfigError, match="share_context must be true or false"):
        MlpmemLM(run=str(run_dir), share_context="sometimes")
