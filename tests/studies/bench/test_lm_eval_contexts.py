"""bench lm-eval on a finished tiny run: both paths timed per method, the same answers, files written; the
methods from one backbone pass against one at a time, the same answers; fp32 against bf16, how far they differ."""

from __future__ import annotations

import json

import pytest

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import MC_ITEMS, MC_TASK, write_mc_task, write_task
from mlpmem.errors import ConfigError
from studies.bench.lm_eval_contexts import PLAIN, SHARED, LmEvalBenchConfig, main


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
    written = json.loads((tmp_path / "docs" / "results.json").read_text())
    assert written["methods"].keys() == {"backbone", "memory"}
    assert "HFLM / shared" in (tmp_path / "docs" / "report.md").read_text()
    one = r["one_pass"]
    assert one["methods"] == ["backbone", "memory"] and one["speedup_wall"] > 0
    assert one["backbone_passes_per_round"] > 0
    for method, m in one["agreement"].items():
        assert m["greedy_equal"] and m["scores_equal"] and m["max_abs_loglik_diff"] < 1e-4, method
    assert "from one backbone pass" in (tmp_path / "docs" / "report.md").read_text()


def test_bench_lm_eval_one_pass_only(tiny_run, tmp_path):
    (tmp_path / "tasks").mkdir()
    folder = write_mc_task(tmp_path / "tasks")
    cfg = LmEvalBenchConfig(run=str(tiny_run), methods=["backbone", "knnlm"], tasks_dir=str(folder),
                            tasks=["tiny_mc"], limit=3, threads=1, docs_dir=str(tmp_path / "docs"), per_method=False)
    r = main(cfg)
    assert r["methods"] == {} and r["one_pass"]["methods"] == ["backbone", "knnlm"]
    assert all(m["scores_equal"] for m in r["one_pass"]["agreement"].values())
    planned = r["one_pass"]["planned"]  # the one pass's plan against every context shared: the same answers
    assert planned["speedup_wall"] > 0
    assert all(m["scores_equal"] and m["greedy_equal"] and m["max_abs_loglik_diff"] < 1e-4
               for m in planned["agreement"].values())
    text = (tmp_path / "docs" / "report.md").read_text()
    assert "Every context shared / the plan" in text
    assert "HFLM / shared" not in text and "--one-pass-only" in text and "from one backbone pass" in text


def test_bench_lm_eval_compare_precision(tiny_run, tmp_path):
    (tmp_path / "tasks").mkdir()
    folder = write_mc_task(tmp_path / "tasks")
    write_task(folder, "tiny_mc_again", MC_TASK, folder / "items.jsonl")  # two tasks: a task average to pair
    cfg = LmEvalBenchConfig(run=str(tiny_run), methods=["backbone", "memory", "rag-bm25"], tasks_dir=str(folder),
                            tasks=["tiny_mc", "tiny_mc_again"], limit=3, threads=1, docs_dir=str(tmp_path / "docs"),
                            compare_precision="bf16", profile=True)
    r = main(cfg)["precision"]
    assert r["methods"] == ["backbone", "memory"] and r["precision"] == "bf16" and r["speedup_wall"] > 0
    for method, m in r["agreement"].items():
        assert m["requests"] == 2 * sum(2 * len(i["choices"]) for i in MC_ITEMS), method
        assert 0 < m["mean_abs_loglik_diff"] <= m["max_abs_loglik_diff"] < 1.0, method  # bf16 rounds, no more
        assert m["items_changed"]["acc"]["items"] == 2 * len(MC_ITEMS)
        assert set(m["delta"]) == {"acc", "acc_mutual_info"} and m["delta"]["acc"]["n"] == 2 * len(MC_ITEMS)
    assert set(r["vs_backbone"]["memory"]) == {"fp32", "bf16"}
    text = (tmp_path / "docs" / "report.md").read_text()
    assert "at fp32 and at bf16" in text and "--compare-precision bf16 --profile" in text
    profile = r["profile"]  # one more round each under the profiler
    assert profile["ways"] == ["fp32", "bf16"] and min(profile["total_ms"].values()) > 0
    assert profile["rows"][-1]["op"] == "(other operators)" and any(row["op"].startswith("aten::")
                                                                    for row in profile["rows"])
    assert "Where the time goes" in text and "| total |" in text
    written = json.loads((tmp_path / "docs" / "results.json").read_text())
    assert "precision" in written and "one_pass" not in written  # the precision report alone


@pytest.mark.parametrize("bad", [{"methods": ["mosaics"]}, {"methods": ["nope"]}, {"limit": 0},
                                 {"methods": ["memory", "rag-bm25"], "per_method": False},
                                 {"compare_precision": "fp16"}, {"profile": True},
                                 {"methods": ["rag-bm25"], "compare_precision": "bf16"}])
def test_bench_lm_eval_bad_settings_are_one_line_errors(bad):
    with pytest.raises(ConfigError, match="bench lm-eval"):
        LmEvalBenchConfig(**bad)
