"""Several methods of one run from one backbone pass: each scores exactly as its own ``mlpmem`` model does.

On a finished tiny run, a multiple-choice task with accuracy and domain-conditional PMI scored by the backbone,
the memory, the memory with a gate and kNN-LM through :class:`OnePassLM` (one shared :class:`OnePass`) and through
the ``mlpmem`` model type one method at a time: every request's log-likelihood and greedy flag agree, and the
methods after the first run no backbone pass at all. Truncation as ``HFLM`` truncates; bad use is refused.
"""

from __future__ import annotations

import math

import pytest
import torch

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import MC_ITEMS as ITEMS
from helpers.harness import mc_responses, write_mc_task
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import MlpmemLM
from mlpmem.evaluation.one_pass import OnePass, OnePassLM, fitted
from mlpmem.inference.gate import Gate, GateConfig
from mlpmem.inference.gate_io import save_gate
from mlpmem.pipeline.hf_export import augmented_from_run

# fixture ``run_dir`` (a finished tiny run): tests/evaluation/conftest.py


@pytest.fixture(scope="module")
def mc_tasks(tmp_path_factory):
    return write_mc_task(tmp_path_factory.mktemp("mc-tasks"))


@pytest.mark.parametrize("min_saved", [0, 10**6], ids=["contexts-shared", "whole-rows"])
def test_each_method_of_one_pass_scores_as_its_own_model(run_dir, mc_tasks, tmp_path, min_saved):
    """Both paths: every context with two distinct rows run once, and every request scored on its whole row
    (left-padded beside rows of other lengths)."""
    gate_dir = tmp_path / "gate"
    save_gate(Gate(GateConfig(hidden_size=4)), gate_dir, augmented_from_run(run_dir).memory)
    methods = {"backbone": {"method": "backbone"}, "memory": {"lam": 0.4},
               "memory-gate": {"gate": True, "gate_dir": str(gate_dir), "gate_offset": 0.5},
               "knnlm": {"method": "knnlm"}}
    one = OnePass({label: {"run": str(run_dir), **args} for label, args in methods.items()}, min_saved=min_saved)
    passes = []
    for label, args in methods.items():
        got = mc_responses(OnePassLM(one, label, batch_size=2), mc_tasks)
        passes.append(one.passes)
        expected = mc_responses(MlpmemLM(run=str(run_dir), batch_size=2, **args), mc_tasks)
        assert len(got) == len(expected) == sum(2 * len(i["choices"]) for i in ITEMS)
        for (loglik, greedy), (want, want_greedy) in zip(got, expected):
            assert math.isclose(loglik, want, rel_tol=1e-5, abs_tol=1e-4) and greedy == want_greedy, label
    assert passes[0] > 0 and passes == [passes[0]] * len(methods)  # the first method scored them all


def test_one_pass_at_bf16_scores_as_each_methods_own_bf16_model(run_dir, mc_tasks, monkeypatch):
    """... with every forward of the pass under one autocast (its cast weights cleared once, after the pass)."""
    methods = {"backbone": {"method": "backbone"}, "memory": {"lam": 0.4}}
    one = OnePass({label: {"run": str(run_dir), "precision": "bf16", **args} for label, args in methods.items()},
                  min_saved=0)  # contexts shared: many forwards
    assert one.precision == "bf16"
    clears, real_clear = [], torch.clear_autocast_cache
    for label, args in methods.items():
        with monkeypatch.context() as patch:
            patch.setattr(torch, "clear_autocast_cache", lambda: clears.append(one.passes) or real_clear())
            got = mc_responses(OnePassLM(one, label, batch_size=2), mc_tasks)
        assert clears == [one.passes] and one.passes > 1, label  # the first method ran the pass, once
        expected = mc_responses(MlpmemLM(run=str(run_dir), batch_size=2, precision="bf16", **args), mc_tasks)
        exact = mc_responses(MlpmemLM(run=str(run_dir), batch_size=2, **args), mc_tasks)
        assert [g[0] for g in got] != [e[0] for e in exact], label  # at bf16, not fp32
        for (loglik, _), (want, _) in zip(got, expected):  # bf16 rounds differently in other batches only
            assert math.isclose(loglik, want, rel_tol=0.02, abs_tol=0.05), label


def test_a_long_context_is_cut_from_the_left_as_hflm_cuts_it():
    assert fitted([1, 2, 3, 4, 5], [6, 7], max_length=4) == ((3, 4, 5), (6, 7))  # (3, 4, 5, 6) fills 4
    assert fitted([1, 2], [3], max_length=4) == ((1, 2), (3,))
    with pytest.raises(ConfigError, match="does not fit"):
        fitted([1], [2, 3, 4], max_length=2)


def test_methods_that_cannot_share_the_pass_are_one_line_errors(run_dir, tmp_path, mc_tasks):
    with pytest.raises(ConfigError, match="one run= folder"):
        OnePass({"a": f"run={run_dir},method=backbone", "b": f"run={tmp_path},method=backbone"})
    with pytest.raises(ConfigError, match="cannot share the backbone pass"):
        OnePass({"backbone": f"run={run_dir},method=backbone", "rag": f"run={run_dir},method=rag-bm25"})
    with pytest.raises(ConfigError, match="one precision"):
        OnePass({"a": f"run={run_dir},method=backbone", "b": f"run={run_dir},method=memory,precision=bf16"})
    one = OnePass({"backbone": f"run={run_dir},method=backbone"})
    with pytest.raises(ConfigError, match="not among"):
        OnePassLM(one, "memory")
    with pytest.raises(ConfigError, match="loglikelihood requests only"):
        OnePassLM(one, "backbone").loglikelihood_rolling([])


def test_the_command_scores_several_methods_from_one_pass(run_dir, mc_tasks, tmp_path, capsys):
    """``mlpmem lm-eval --methods``: one results file per method, each as the method's own model scores it."""
    import json

    from mlpmem.cli import main

    out = tmp_path / "results"
    assert main(["lm-eval", "--tasks", "tiny_mc", "--include-path", str(mc_tasks), "--local-only",
                 "--model-args", f"run={run_dir},lam=0.3", "--methods", "backbone,memory", "--batch-size", "2",
                 "--log-samples", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "## backbone" in printed and "## memory" in printed
    memory = json.loads((out / "memory.json").read_text())
    assert memory["config"]["mlpmem"]["lam"] == 0.3 and memory["config"]["mlpmem"]["one_pass"] == ["backbone",
                                                                                                    "memory"]
    got = [tuple(r[0]) for s in sorted(memory["samples"]["tiny_mc"], key=lambda s: s["doc_id"]) for r in s["resps"]]
    expected = mc_responses(MlpmemLM(run=str(run_dir), lam=0.3, batch_size=2), mc_tasks)
    assert all(math.isclose(a[0], b[0], rel_tol=1e-5, abs_tol=1e-4) for a, b in zip(got, expected))
    assert (out / "backbone.json").is_file()
    capsys.readouterr()
    for bad, message in ((["--methods", "memory,rag-bm25"], "--methods takes distinct methods"),
                         (["--methods", "memory", "--model", "hf"], "--methods takes distinct methods"),
                         (["--model-args", f"run={run_dir},method=memory"], "leave method= out")):
        args = ["lm-eval", "--tasks", "tiny_mc", "--include-path", str(mc_tasks), "--local-only",
                "--model-args", f"run={run_dir}", "--methods", "memory", *bad]
        assert main(args) != 0
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert message in last and "Traceback" not in last, bad
