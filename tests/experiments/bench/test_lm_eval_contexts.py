"""bench lm-eval on a finished tiny run: both paths timed per method, the same answers, files written; the
methods from one backbone pass against one at a time, the same answers."""

from __future__ import annotations

import json

import pytest

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import MC_ITEMS, write_mc_task
from mlpmem.errors import ConfigError
from mlpmem.experiments.bench.lm_eval_contexts import PLAIN, SHARED, LmEvalBenchConfig, main


def test_bench_lm_eval_times_both_paths_and_they_agree(tiny_run, tmp_path):
    (tmp_path / "tasks").mkdir()
    folder = write_mc_task(tmp_path / "tasks")
    cfg = LmEvalBenchConfig(run=str(tiny_run), methods=["backbone", "memory"], tasks_dir=str(folder),
                            tasks=["tiny_mc"], limit=3, threads=1, docs_dir=str(tmp_path / "docs"))
    r = main(cfg)
    for method in ("backbone", "memory"):
        m = r["methods"][method]
        assert m["requests"] == sum(2 * len(i["choices"]) for i in MC_ITEMS)
        assert m["greedy_equal"] and m["scores_equal"] and m["max_abs_loglik_diff"] < 1e-4
        assert m["seconds"][SHARED]["wall"]["n"] == m["seconds"][PLAIN]["wall"]["n"] == 1 and m["speedup_wall"] > 0
    assert json.loads((tmp_path / "docs" / "lm-eval-contexts.json").read_text())["methods"].keys() == {"backbone",
                                                                                                    "memory"}
    assert "HFLM / shared" in (tmp_path / "docs" / "lm-eval-contexts.md").read_text()
    one = r["one_pass"]
    assert one["methods"] == ["backbone", "memory"] and one["speedup_wall"] > 0
    assert one["backbone_passes_per_round"] > 0
    for method, m in one["agreement"].items():
        assert m["greedy_equal"] and m["scores_equal"] and m["max_abs_loglik_diff"] < 1e-4, method
    assert "from one backbone pass" in (tmp_path / "docs" / "lm-eval-contexts.md").read_text()


def test_bench_lm_eval_one_pass_only(tiny_run, tmp_path):
    (tmp_path / "tasks").mkdir()
    folder = write_mc_task(tmp_path / "tasks")
    cfg = LmEvalBenchConfig(run=str(tiny_run), methods=["backbone", "knnlm"], tasks_dir=str(folder),
                            tasks=["tiny_mc"], limit=3, threads=1, docs_dir=str(tmp_path / "docs"), per_method=False)
    r = main(cfg)
    assert r["methods"] == {} and r["one_pass"]["methods"] == ["backbone", "knnlm"]
    assert all(m["scores_equal"] for m in r["one_pass"]["agreement"].values())
    text = (tmp_path / "docs" / "lm-eval-contexts.md").read_text()
    assert "HFLM / shared" not in text and "--one-pass-only" in text and "from one backbone pass" in text


@pytest.mark.parametrize("bad", [{"methods": ["mosaics"]}, {"methods": ["nope"]}, {"limit": 0},
                                 {"methods": ["memory", "rag-bm25"], "per_method": False}])
def test_bench_lm_eval_bad_settings_are_one_line_errors(bad):
    with pytest.raises(ConfigError, match="bench lm-eval"):
        LmEvalBenchConfig(**bad)
