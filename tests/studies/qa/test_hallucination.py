"""The hallucination section of the QA report: tasks sorted into battery / detection / preference, each judged on its
own, from constructed lm-eval results."""

import json

from mlpmem.evaluation.stats import BootstrapConfig
from studies.qa.battery_report import task_sources
from studies.qa.choice_shift import Shift, shorter_target_share
from studies.qa.hallucination import detection_claim, family_rows, hallucination_section, task_family

CFG = BootstrapConfig(resamples=500, seed=0)
TASKS = ["mlpmem_polarity", "mlpmem_analogy_family", "mlpmem_halueval_detect_qa", "mlpmem_halueval_detect_dialogue",
         "mlpmem_halueval_prefer_test", "mlpmem_halueval_prefer_held_out"]


def results(scores: dict[str, list[int]]) -> dict:
    """lm-eval results with samples: per task the acc, PMI and acc_norm of each item (all three the same)."""
    return {"samples": {task: [{"doc_id": i, "doc": {"id": f"{task}-{i}"}, "acc": float(s), "acc_norm": float(s),
                                "acc_mutual_info": float(s)} for i, s in enumerate(items)]
                        for task, items in scores.items()},
            "configs": {"mlpmem_polarity": {"metadata": {"source": "gensim==4.4.0 test data"}}, "other": {}}}


def test_each_task_belongs_to_one_family():
    assert [task_family(t) for t in TASKS] == ["battery", "battery", "detect", "detect", "prefer", "prefer"]


def test_families_are_compared_and_averaged_apart():
    base = results({t: [1, 0] * 20 for t in TASKS})
    memory = results({**{t: [1, 0] * 20 for t in TASKS}, "mlpmem_halueval_detect_qa": [1] * 40})
    families = family_rows(base, {"memory": memory}, CFG)
    assert set(families) == {"battery", "detect", "prefer"}
    tasks = {f: {r.task for r in rows["memory"]} for f, rows in families.items()}
    assert tasks["battery"] == {"mlpmem_polarity", "mlpmem_analogy_family", "average"}
    assert tasks["detect"] == {"mlpmem_halueval_detect_qa", "mlpmem_halueval_detect_dialogue", "average"}
    battery_average = next(r for r in families["battery"]["memory"] if r.task == "average" and r.metric == "acc")
    assert battery_average.delta.estimate == 0.0  # the detection gain does not reach the battery's average
    qa = next(r for r in families["detect"]["memory"] if r.task == "mlpmem_halueval_detect_qa" and r.metric == "acc")
    assert qa.base.estimate == 50.0 and qa.method.estimate == 100.0 and qa.delta.low > 0

    text = hallucination_section(families, {"memory": "memory + backbone"})
    assert "| qa | 40 | 50.0 [" in text and "53.99 → 64.07" in text and "| held_out | 40 |" in text
    ours, ok = detection_claim(families["detect"]["memory"])
    assert ok is False and "qa 50.0 → 100.0" in ours  # dialogue did not rise: not reproduced


def test_detection_claim_reproduced_only_when_every_task_rises():
    base = results({"mlpmem_halueval_detect_qa": [1, 0] * 30, "mlpmem_halueval_detect_dialogue": [1, 0] * 30})
    memory = results({"mlpmem_halueval_detect_qa": [1] * 60, "mlpmem_halueval_detect_dialogue": [1] * 60})
    assert detection_claim(family_rows(base, {"memory": memory}, CFG)["detect"]["memory"])[1] is True
    assert detection_claim([]) == ("not scored", None)
    assert hallucination_section({}, {}).startswith("(not run")


def test_task_sources_come_from_the_backbones_battery_file(tmp_path):
    path = tmp_path / "backbone.json"
    path.write_text(json.dumps(results({"mlpmem_polarity": [1]})))
    assert task_sources({"methods": {"backbone": str(path)}}) == {"mlpmem_polarity": "gensim==4.4.0 test data"}
    assert task_sources(None) == {}


def test_preference_reports_both_lengths_and_where_choices_moved():
    base = results({"mlpmem_halueval_prefer_test": [1, 0] * 20})
    memory = results({"mlpmem_halueval_prefer_test": [1] * 40})
    families = family_rows(base, {"memory": memory}, CFG)
    shifts = {"memory": {"mlpmem_halueval_prefer_test": Shift(items=40, changed=20, shorter=15, longer=5)}}
    text = hallucination_section(families, {"memory": "memory + backbone"}, shifts,
                                 {"mlpmem_halueval_prefer_test": 97.5})
    assert "Summed log-likelihood (acc):" in text and "Per byte (acc norm):" in text
    assert "shorter choice in test 97.5 % of the items" in text
    assert "| memory + backbone, test | 40 | 20 | 15 | 5 | 0 |" in text


def test_shorter_target_share_counts_items_whose_right_choice_is_strictly_shortest():
    docs = [{"label": 1, "choices": ["a long wrong answer", "right"]},
            {"label": 0, "choices": ["a long right answer", "no"]},
            {"label": 0, "choices": ["same", "size"]}]
    lm_eval = {"samples": {"t": [{"doc": d} for d in docs], "u": []}}
    assert shorter_target_share(lm_eval, ["t", "u"]) == {"t": 100.0 / 3}


def test_general_capability_claim_pairs_the_memory_with_cpt_and_lora(tmp_path):
    from studies.qa.claims import claims

    def file(name: str, right: list[int]) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(results({"mlpmem_polarity": right, "mlpmem_analogy_family": right})))
        return str(path)

    half = [1, 0] * 20
    suite = {"benchmarks": {}, "config": {"no_regression": {"memory_from": "halueval_qa"}},
             "battery": {"methods": {"memory": file("memory", [1] * 40), "cpt": file("cpt", half),
                                     "lora": file("lora", half)}}}
    c11 = next(c for c in claims(suite, CFG) if c["id"] == "C11")
    assert c11["reproduced"] is True and "vs CPT: PMI average 100.0 vs 50.0" in c11["ours"]
    suite["battery"]["methods"]["lora"] = file("lora", [1] * 40)  # LoRA as good as the memory
    c11 = next(c for c in claims(suite, CFG) if c["id"] == "C11")
    assert c11["reproduced"] is False and "(not distinguishable from LoRA)" in c11["ours"]
    del suite["battery"]["methods"]["cpt"]
    assert not [c for c in claims(suite, CFG) if c["id"] == "C11"]  # judged only with all three scored
