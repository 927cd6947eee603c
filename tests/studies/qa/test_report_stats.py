"""The QA report's intervals (studies.qa.intervals / claims / report) on constructed per-item scores:
per-item scores written and read, a method against itself exactly 0, pairing by id, claims judged by their paired
intervals, and method files without per-item scores still reported ("no interval")."""

from __future__ import annotations

import json

import pytest

from mlpmem.errors import CorruptArtifact
from mlpmem.evaluation.stats import ABOVE, BELOW, SAME, BootstrapConfig
from studies.qa.claims import claims
from studies.qa.intervals import NO_INTERVAL, compare_scored, intervals_json, score_interval
from studies.qa.metrics import score
from studies.qa.per_item import PER_ITEM, item_scores, qa_per_item, without_per_item
from studies.qa.report import ORDER, cost_minutes, write_report

FAST = BootstrapConfig(resamples=1000, seed=0)
N = 40


def scored(right: list[int], prefix: str = "q", items: bool = True) -> dict:
    """A scored split: EM = F1 = the 1/0 ``right`` per question (ids ``prefix0``, ``prefix1``...)."""
    out = {"em": 100 * sum(right) / len(right), "f1": 100 * sum(right) / len(right), "n": len(right)}
    if items:
        out[PER_ITEM] = {"ids": [f"{prefix}{i}" for i in range(len(right))], "em": list(right), "f1": list(right)}
    return out


def choice(right: list[int], items: bool = True) -> dict:
    out = {"acc_ll": 100 * sum(right) / len(right), "acc_pmi": 100 * sum(right) / len(right), "n": len(right)}
    if items:
        out[PER_ITEM] = {"ids": [f"mc{i}" for i in range(len(right))], "acc_ll": list(right), "acc_pmi": list(right)}
    return out


def suite_results(qa: dict[str, dict[str, list[int]]], nr: dict[str, list[int]] | None = None,
                  items: bool = True) -> dict:
    """Results of a suite: ``qa[bench][method]`` per-question 1/0 on the test split; ``nr[method]`` the
    multiple-choice battery of the synthetic models."""
    run = {"test": {"backbone": 20.0, "memory+backbone": 15.0, "knnlm": 16.0, "memory": 30.0},
           "knnlm_chosen": {"k": 16, "temperature": 1.0, "lambda": 0.2}, "datastore_tokens": 1000, "lambda": 0.3}
    benches = {}
    for bench, methods in qa.items():
        benches[bench] = {"memory_run": run, "questions": {"validation": 4, "test": N},
                          "methods": {m: {"test": scored(r, items=items)} for m, r in methods.items()}}
    for method, right in (nr or {}).items():
        benches["synthetic"]["methods"][method]["no_regression"] = {"general_knowledge": choice(right, items)}
    config = {"out_dir": "runs/qa", "backbone": "tiny", "lambda_grid": [0.0, 0.5], "shots": 0,
              "no_regression": {"memory_from": "synthetic", "qa_wikidata": 0, "mc_limit": N},
              "bootstrap": {"resamples": FAST.resamples, "seed": FAST.seed}}
    return {"benchmarks": benches, "config": config}


def claim(found: list[dict], cid: str) -> dict:
    return next(c for c in found if c["id"] == cid)


WRONG, RIGHT = [0] * N, [1] * N
SOME = [1] * 5 + [0] * (N - 5)  # 5 of 40 right


def test_per_item_scores_are_written_and_read_by_id():
    predictions = [{"id": "a", "prediction": "The Shore", "answers": ["shore"]},
                   {"id": "b", "prediction": "blue sky", "answers": ["sky", "red"]},
                   {"id": "c", "prediction": "", "answers": ["x"]}]
    record = qa_per_item(predictions)
    assert record == {"ids": ["a", "b", "c"], "em": [1, 0, 0], "f1": [1.0, pytest.approx(0.6667), 0.0]}
    means = score([p["prediction"] for p in predictions], [p["answers"] for p in predictions])
    split = {**means, PER_ITEM: record}
    assert 100 * sum(item_scores(split, "em").values()) / 3 == means["em"]
    assert 100 * sum(item_scores(split, "f1").values()) / 3 == pytest.approx(means["f1"], abs=0.005)
    assert item_scores({"em": 1.0}, "em") is None and item_scores(split, "acc_ll") is None  # old file / metric
    with pytest.raises(CorruptArtifact, match="values for"):
        item_scores({PER_ITEM: {"ids": ["a"], "em": [1, 0]}}, "em")
    with pytest.raises(CorruptArtifact, match="repeat"):
        item_scores({PER_ITEM: {"ids": ["a", "a"], "em": [1, 0]}}, "em")
    assert without_per_item({"x": [split], "y": 1}) == {"x": [means], "y": 1}


def test_a_method_against_itself_is_exactly_zero_and_not_distinguishable():
    split = scored(SOME)
    c = compare_scored("synthetic", "f1", split, split, FAST)
    assert (c.delta.estimate, c.delta.low, c.delta.high, c.delta.stderr) == (0.0, 0.0, 0.0, 0.0)
    assert c.delta.n == N and c.verdict == SAME == "not distinguishable from base"
    assert c.base.estimate == c.method.estimate == 12.5 and c.base.stderr > 0


def test_pairing_is_by_id_over_the_shared_questions():
    base = scored(WRONG)
    method = scored(RIGHT[:30], prefix="q")  # 30 of the 40 questions, all right
    record = method[PER_ITEM]
    record["ids"], record["em"] = record["ids"][::-1], record["em"][::-1]  # file order does not matter
    c = compare_scored("synthetic", "em", base, method, FAST)
    assert c.delta.n == 30 and c.delta.estimate == 100.0 and c.verdict == ABOVE
    assert compare_scored("synthetic", "em", base, scored(RIGHT, prefix="other"), FAST).verdict == NO_INTERVAL
    old = compare_scored("synthetic", "em", base, scored(RIGHT, items=False), FAST)
    assert old.delta is None and old.verdict == NO_INTERVAL and old.point_delta == 100.0


def test_claims_hold_only_when_the_paired_interval_excludes_zero():
    clear = suite_results({"synthetic": {"backbone": WRONG, "knnlm": SOME, "cpt": WRONG, "lora": WRONG,
                                         "memory": RIGHT},
                           "disfl_qa": {"backbone": SOME, "knnlm": SOME, "cpt": SOME, "lora": WRONG,
                                        "memory": RIGHT}})
    found = claims(clear, FAST)
    for cid in ("C3", "C4", "C6"):
        assert claim(found, cid)["reproduced"] is True, cid
        assert claim(found, cid)["judged_by"] == "paired 95 % interval"
        assert all(x["verdict"] == ABOVE for x in claim(found, cid)["comparisons"])
    assert claim(found, "C1")["judged_by"] == "point estimate" and claim(found, "C1")["reproduced"] is True
    # one benchmark where memory equals the backbone: "not distinguishable", so C3 is not reproduced
    tied = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT},
                          "disfl_qa": {"backbone": SOME, "memory": SOME}})
    c3 = claim(claims(tied, FAST), "C3")
    assert c3["reproduced"] is False and "not distinguishable from base" in c3["ours"]
    # a point estimate above but an interval covering 0 (one question of 40) does not hold either
    one = [1] + [0] * (N - 1)
    close = suite_results({"synthetic": {"backbone": WRONG, "memory": one}})
    c3 = claim(claims(close, FAST), "C3")
    assert c3["comparisons"][0]["delta_vs_base"]["estimate"] == 2.5 and c3["reproduced"] is False


def test_rag_gap_claim_is_a_paired_contrast():
    half = [1] * 20 + [0] * 20
    most = [1] * 36 + [0] * 4
    holds = suite_results({"synthetic": {"backbone": WRONG, "rag-bm25": RIGHT, "memory": most}})
    c5 = claim(claims(holds, FAST), "C5")
    assert c5["reproduced"] is True and "90.0 % of the gap closed" in c5["ours"]
    fails = suite_results({"synthetic": {"backbone": WRONG, "rag-bm25": RIGHT, "memory": SOME}})
    assert claim(claims(fails, FAST), "C5")["reproduced"] is False
    exactly = suite_results({"synthetic": {"backbone": WRONG, "rag-bm25": RIGHT, "memory": half}})
    assert claim(claims(exactly, FAST), "C5")["comparisons"][0]["verdict"] == SAME


def test_no_regression_claim_fails_only_below_the_backbone():
    qa = {"synthetic": {"backbone": WRONG, "memory": RIGHT}}
    below = claim(claims(suite_results(qa, {"backbone": RIGHT, "memory": SOME}), FAST), "C7")
    assert below["reproduced"] is False and BELOW in below["ours"]
    same = claim(claims(suite_results(qa, {"backbone": SOME, "memory": SOME}), FAST), "C7")
    assert same["reproduced"] is True and "2 not distinguishable from base" in same["ours"]


def test_the_battery_judges_c7_on_pmi_and_reports_accuracy_beside_it():
    """Accuracy below the backbone (a mixture's length penalty) does not fail C7; PMI below does."""
    from mlpmem.evaluation.compare import Row
    from mlpmem.evaluation.stats import bootstrap_mean, paired_difference

    def row(metric, base, method):
        return Row("task", metric, bootstrap_mean(base, FAST), bootstrap_mean(method, FAST),
                   paired_difference(base, method, FAST))

    qa = {"synthetic": {"backbone": WRONG, "memory": RIGHT}}
    acc_below = {"memory": [row("acc", RIGHT, SOME), row("acc_mutual_info", SOME, SOME)]}
    c7 = claim(claims(suite_results(qa), FAST, acc_below), "C7")
    assert c7["reproduced"] is True and c7["ours"].startswith("lm-eval battery, PMI on 1 task metrics")
    assert "also acc on 1 task metrics: 1 below" in c7["ours"] and len(c7["comparisons"]) == 2
    pmi_below = {"memory": [row("acc", SOME, SOME), row("acc_mutual_info", RIGHT, SOME)]}
    assert claim(claims(suite_results(qa), FAST, pmi_below), "C7")["reproduced"] is False


def test_report_and_results_json_carry_the_intervals(tmp_path):
    results = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT, "knnlm": SOME},
                             "disfl_qa": {"backbone": SOME, "memory": SOME, "knnlm": WRONG}},
                            {"backbone": SOME, "memory": SOME})
    write_report(results, tmp_path, "python -m studies qa report suite.yaml")
    report = (tmp_path / "report.md").read_text()
    assert "Δ vs backbone [95 % CI]" in report and "| MLP Memory | synthetic | F1 | 40 |" in report
    assert "+100.0 [+100.0, +100.0]" in report and "not distinguishable from base" in report
    assert "![Δ F1 vs backbone](qa-delta-f1.png)" in report and (tmp_path / "qa-delta-f1.png").stat().st_size > 0
    assert (tmp_path / "no-regression-delta.png").is_file()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert PER_ITEM not in json.dumps(saved)  # the docs copy is compact
    qa = saved["intervals"]["qa"]["synthetic"]
    assert qa["n_test"] == N
    knn = qa["methods"]["knnlm"]["test"]
    assert knn["f1"]["stderr"] > 0 and knn["f1"]["estimate"] == 12.5
    assert knn["delta_vs_base"]["f1"]["verdict"] == ABOVE and len(knn["delta_vs_base"]["f1"]["ci95"]) == 2
    nr = saved["intervals"]["no_regression"]["general_knowledge"]
    assert nr["n_items"] == N and set(nr["methods"]["memory"]) == {"acc", "pmi", "delta_vs_base"}
    assert nr["methods"]["memory"]["delta_vs_base"]["pmi"]["ci95"] == [0.0, 0.0]
    assert claim(saved["claims"], "C3")["reproduced"] is False  # disfl_qa: memory ties the backbone
    # head to head: the memory against kNN-LM (no gate was scored, so no gate contrasts)
    contrasts = {(c["method"], c["reference"], c["benchmark"], c["metric"]): c for c in saved["intervals"]["contrasts"]}
    assert set(contrasts) == {("memory", "knnlm", b, m) for b in ("synthetic", "disfl_qa") for m in ("em", "f1")}
    assert contrasts[("memory", "knnlm", "synthetic", "f1")]["estimate"] == 87.5
    assert contrasts[("memory", "knnlm", "synthetic", "f1")]["verdict"] == ABOVE
    assert "| MLP Memory | kNN-LM | synthetic | F1 | 40 | 12.5 ± " in report


def test_method_files_without_per_item_scores_still_make_a_report(tmp_path):
    old = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT, "knnlm": SOME}},
                        {"backbone": SOME, "memory": SOME}, items=False)  # no per-item scores
    write_report(old, tmp_path, "python -m studies qa report suite.yaml")
    report = (tmp_path / "report.md").read_text()
    assert f"100.0 ({NO_INTERVAL})" in report and "+100.0 (no interval)" in report
    assert "(no Δ F1 vs backbone figure" in report and not (tmp_path / "qa-delta-f1.png").exists()
    saved = json.loads((tmp_path / "results.json").read_text())
    memory = saved["intervals"]["qa"]["synthetic"]["methods"]["memory"]["test"]
    assert memory["f1"] == {"estimate": 100.0, "stderr": None, "ci95": None, "n": N}
    assert memory["delta_vs_base"]["f1"]["verdict"] == NO_INTERVAL
    assert claim(saved["claims"], "C3")["reproduced"] is None and claim(saved["claims"], "C7")["reproduced"] is None
    # a mix: the memory's file has per-item scores, the backbone's not -> still no interval for the pair
    mixed = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT}})
    del mixed["benchmarks"]["synthetic"]["methods"]["backbone"]["test"][PER_ITEM]
    split = mixed["benchmarks"]["synthetic"]["methods"]["memory"]["test"]
    assert score_interval(split, "f1", FAST).stderr == 0.0
    js = intervals_json(mixed, FAST, ORDER)["qa"]["synthetic"]["methods"]["memory"]["test"]
    assert js["f1"]["stderr"] == 0.0 and js["delta_vs_base"]["f1"]["ci95"] is None


def test_the_report_says_where_the_question_gate_opens(tmp_path):
    results = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT, "memory-gate": SOME}})
    results["benchmarks"]["synthetic"]["methods"]["memory-gate"].update(
        gate_offset=1.5, gate_mean_lambda={"questions": 0.61, "negatives": 0.052, "unconditional": 0.4049})
    results["config"].update(methods=["backbone", "memory", "memory-gate"], gate_training="questions",
                             gate_negatives=4, gate_negative_tasks=["anachronisms"], gate_negatives_unconditional=True)
    write_report(results, tmp_path, "python -m studies qa report suite.yaml")
    report = (tmp_path / "report.md").read_text()
    assert ("MLP Memory + gate on synthetic, mean λ_t at its offset and floor: the validation questions' answers "
            "0.610, the negatives in their prompts 0.052, the negatives as PMI's unconditional terms (answer prefix "
            "alone) 0.405.") in report
    assert "and 4 negatives (BIG-bench items of families the suite does not score, each also as PMI's " in report
    assert "floor" not in report.split("MLP Memory + gate on synthetic")[0]  # no floor: neither chosen nor closing
    assert "closes the gate" not in report


def test_the_report_gives_the_gates_perplexity_beside_the_fixed_lambda(tmp_path):
    results = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT, "memory-gate": SOME}})
    results["benchmarks"]["synthetic"]["methods"]["memory-gate"].update(
        gate_offset=0.0, gate_text_ppl={"ppl_fixed": 19.5677, "ppl_gate": 18.9614, "mean_gate": 0.3016,
                                        "lambda_fixed": 0.25})
    results["config"].update(methods=["backbone", "memory", "memory-gate"])
    write_report(results, tmp_path, "python -m studies qa report suite.yaml")
    assert ("MLP Memory + gate on the held-out text of synthetic's memory run: perplexity 18.961 with the gate (mean "
            "λ_t 0.30) against 19.568 at the run's fixed λ = 0.25.") in (tmp_path / "report.md").read_text()


def test_the_report_says_where_the_floor_closes_the_gate(tmp_path):
    results = suite_results({"synthetic": {"backbone": WRONG, "memory": RIGHT, "memory-gate": SOME}})
    results["benchmarks"]["synthetic"]["methods"]["memory-gate"].update(
        gate_offset=0.0, gate_floor=0.2, gate_mean_lambda={"questions": 0.5, "negatives": 0.01},
        gate_closed_fraction={"questions": 0.1, "negatives": 0.946})
    results["config"].update(methods=["backbone", "memory", "memory-gate"], gate_training="questions",
                             gate_offset_rule="one_se", gate_floor_grid=[0.0, 0.2])
    write_report(results, tmp_path, "python -m studies qa report suite.yaml")
    report = (tmp_path / "report.md").read_text()
    assert "synthetic: gate offset 0, floor 0.2" in report
    assert ("then the floor (λ_t exactly 0 where the gate before its offset is below it) from [0.0, 0.2] (the "
            "largest within one standard error of the best F1)") in report
    assert ("MLP Memory + gate on synthetic, positions where its floor closes the gate (λ_t = 0): the validation "
            "questions' answers 10 %, the negatives in their prompts 95 %.") in report


def test_the_cost_table_sums_every_recorded_stage_and_names_the_missing(tmp_path):
    results = suite_results({"synthetic": {"backbone": SOME, "memory": SOME}, "disfl_qa": {"backbone": SOME}})
    synthetic = results["benchmarks"]["synthetic"]["methods"]
    synthetic["memory"].update(train_seconds=600.0, wall_seconds=120.0)
    synthetic["backbone"]["wall_seconds"] = 60.0
    machine = {"cpu": "AMD EPYC", "threads": 2, "torch": "2.5", "cuda": False, "device": "cpu", "native_bf16": False}
    results["calls"] = [{"started": "2026-01-01T00:00:00+00:00", "seconds": 1500.0, "machine": machine},
                        {"started": "2026-01-01T01:00:00+00:00", "seconds": None}]  # the second stopped half-way
    results["battery"] = {"wall_seconds": {"backbone": 300.0, "memory": 180.0}}
    cost = cost_minutes(results)
    assert cost["calls"] == {"minutes": 25.0, "not_recorded": 1, "n": 2,
                             "machines": ["AMD EPYC, 2 threads, device cpu, no native bf16", "not recorded"]}
    assert cost["memory_run"]["synthetic"] == {"minutes": 10.0, "not_recorded": 0}
    assert cost["methods"]["synthetic"] == {"minutes": 3.0, "not_recorded": 0}
    assert cost["methods"]["disfl_qa"] == {"minutes": None, "not_recorded": 1}  # its backbone recorded no time
    assert cost["battery"]["all"]["minutes"] == 8.0
    assert cost["total"] == {"minutes": 21.0, "not_recorded": 2}  # disfl_qa's memory run and backbone
    del results["battery"]
    write_report(results, tmp_path, "python -m studies qa report suite.yaml")  # no battery ran
    table = (tmp_path / "report.md").read_text().split("## What it cost")[1]
    assert "| the lm-eval battery, every method |  |  | — |" in table
    assert "| **total** |  |  | **13 (some not recorded)** |" in table
    assert "| every computing call of the suite in its out_dir (2), wall clock" in table
    assert ("|  |  | 25 (some not recorded) |\n\nThe calls ran on: AMD EPYC, 2 threads, device cpu, no native bf16; "
            "not recorded." in table)
    assert json.loads((tmp_path / "results.json").read_text())["cost_minutes"]["total"]["minutes"] == 13.0


def test_the_introduction_names_only_the_mixtures_the_suite_scored():
    from studies.qa.report import _intro

    run = {"out_dir": "runs/qa", "backbone": "b", "shots": 4, "lambda_grid": [0.0, 0.2]}
    intro = _intro({"config": {**run, "methods": ["backbone", "memory"]}, "benchmarks": {}}, "cmd", BootstrapConfig())
    assert "λ of MLP Memory chosen on the validation questions from [0.0, 0.2]" in intro and "kNN-LM" not in intro
    both = _intro({"config": {**run, "methods": ["backbone", "knnlm", "memory"]}, "benchmarks": {}}, "cmd",
                  BootstrapConfig())
    assert "λ of kNN-LM and MLP Memory chosen" in both
    assert "λ of" not in _intro({"config": {**run, "methods": ["backbone"]}, "benchmarks": {}}, "cmd",
                                BootstrapConfig())
