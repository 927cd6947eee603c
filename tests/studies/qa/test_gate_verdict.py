"""The gate's keep / drop rule on constructed suite results: QA splits with per-item scores and lm-eval battery
files with samples, the gate judged against the fixed λ."""

import json

from mlpmem.evaluation.stats import BootstrapConfig
from studies.qa.gate_verdict import gate_section, gate_verdict, judged_measures
from studies.qa.per_item import PER_ITEM

CFG = BootstrapConfig(resamples=500, seed=0)
N = 40
HALF = [1, 0] * (N // 2)
LABELS = {"memory-gate": "gate", "memory": "fixed"}


def split(right: list[int]) -> dict:
    return {"em": 100 * sum(right) / len(right), "f1": 100 * sum(right) / len(right),
            PER_ITEM: {"ids": [f"q{i}" for i in range(len(right))], "em": list(right), "f1": list(right)}}


def lm_eval(tmp_path, name: str, scores: dict[str, list[int]]) -> str:
    path = tmp_path / f"{name}.json"
    samples = {task: [{"doc_id": i, "doc": {"id": f"{task}-{i}"}, "acc": float(s), "acc_norm": float(s),
                       "acc_mutual_info": float(s)} for i, s in enumerate(items)] for task, items in scores.items()}
    path.write_text(json.dumps({"samples": samples}))
    return str(path)


def results(tmp_path, gate_qa: list[int], gate_battery: list[int], ppl: tuple[float, float] | None) -> dict:
    gate = {"test": split(gate_qa), "held_out": split(HALF)}
    if ppl:
        gate["gate_text_ppl"] = {"ppl_gate": ppl[0], "ppl_fixed": ppl[1], "mean_gate": 0.3, "lambda_fixed": 0.25}
    tasks = ["mlpmem_polarity", "mlpmem_halueval_detect_qa"]
    files = {"memory": lm_eval(tmp_path, "memory", dict.fromkeys(tasks, HALF)),
             "memory-gate": lm_eval(tmp_path, "gate", {tasks[0]: gate_battery, tasks[1]: HALF})}
    methods = {"memory": {"test": split(HALF), "held_out": split(HALF)}, "memory-gate": gate}
    return {"benchmarks": {"halueval_qa": {"methods": methods}}, "battery": {"methods": files}}


def test_the_gate_is_kept_only_when_it_beats_the_fixed_lambda_and_is_below_it_nowhere(tmp_path):
    same = results(tmp_path, HALF, HALF, ppl=(19.0, 19.5))
    judged = judged_measures(same, CFG)
    families = {j.family for j in judged}
    assert families == {"qa", "battery", "detect"}
    assert len([j for j in judged if j.family == "qa"]) == 4  # EM, F1 on test and control
    assert {j.metric for j in judged if j.family == "battery"} == {"acc", "acc_mutual_info"}
    verdict = gate_verdict(same, CFG)
    assert verdict["keep"] and verdict["above"] == ["halueval_qa held-out text perplexity"]  # the PPL alone beats

    worse = gate_verdict(results(tmp_path, HALF, [0] * N, ppl=(19.0, 19.5)), CFG)
    assert not worse["keep"] and "battery: mlpmem_polarity acc" in worse["below"]
    text = gate_section(worse, {}, LABELS)
    assert "the fixed λ stays the default" in text and "| battery | mlpmem_polarity | acc | 40 |" in text
    assert "(below)" in text and json.dumps(worse)  # machine-readable as it stands

    nowhere = gate_verdict(results(tmp_path, HALF, HALF, ppl=(20.0, 19.5)), CFG)
    assert not nowhere["keep"] and not nowhere["below"]
    assert "beats it nowhere that matters" in gate_section(nowhere, {}, LABELS)

    for other in ({"gate_training": "questions"}, {"gate_offset": 3.0}, {"gate_floor": 0.2}):  # not the gate judged
        r = results(tmp_path, HALF, HALF, ppl=(19.0, 19.5))
        r["benchmarks"]["halueval_qa"]["methods"]["memory-gate"].update(other)
        assert gate_verdict(r, CFG)["perplexity"] == [] and not gate_verdict(r, CFG)["keep"]

    better = gate_verdict(results(tmp_path, [1] * N, HALF, ppl=None), CFG)
    assert better["keep"] and better["above"][0] == "closed-book QA: halueval_qa EM"
    assert "**Verdict: keep the gate**" in gate_section(better, {}, LABELS)


def test_no_gate_scored_means_no_verdict(tmp_path):
    r = results(tmp_path, HALF, HALF, ppl=None)
    del r["benchmarks"]["halueval_qa"]["methods"]["memory-gate"]
    r["battery"]["methods"].pop("memory-gate")
    assert gate_verdict(r, CFG) is None and gate_section(None, {}, LABELS).startswith("(the gate was not scored")
