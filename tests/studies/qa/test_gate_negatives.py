"""The question gate's negatives: qa_wikidata cloze facts, or BIG-bench items from task families the suite does
not score, in the task's own prompt."""

from __future__ import annotations

import pytest

from helpers.bigbench import write_archive
from mlpmem.errors import ConfigError
from studies.qa.config import QASuiteConfig
from studies.qa.gate_negatives import gate_negatives
from studies.qa.no_regression import no_regression_items

SUITE = {"benchmarks": {"synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml"}}, "seed": 3,
         "gate_training": "questions", "no_regression": {"memory_from": "synthetic", "qa_wikidata": 4,
                                                         "mc_tasks": []}}


def choice_task(name: str, n: int, output_prefix: str | None = None) -> dict:
    data = {"examples": [{"input": f"{name} question {i}?", "target_scores": {f"yes {i}": 1, "no": 0}}
                         for i in range(n)]}
    return data if output_prefix is None else {**data, "example_output_prefix": output_prefix}


def test_gate_negatives_are_cloze_facts_outside_the_no_regression_sample(tmp_path, monkeypatch):
    facts = {"qa_wikidata": {"examples": [{"input": f"The colour of thing {i} is", "target": f"c{i}"}
                                          for i in range(10)]}}
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(write_archive(tmp_path / "bigbench-1.0.0.tar.gz", facts)))
    cfg = QASuiteConfig(**SUITE, gate_negatives=6)
    negatives = gate_negatives(cfg)
    tested = {q["id"] for q in no_regression_items(cfg.no_regression, cfg.seed)["qa_wikidata"]}
    assert len(negatives) == 6 and all(q["cloze"] for q in negatives)
    assert not tested & {q["id"] for q in negatives} and len(tested | {q["id"] for q in negatives}) == 10
    assert gate_negatives(QASuiteConfig(**SUITE)) == []
    with pytest.raises(ConfigError, match="exceed the 10 qa_wikidata facts"):
        gate_negatives(QASuiteConfig(**SUITE, gate_negatives=7))
    with pytest.raises(ConfigError, match="gate_negatives"):
        QASuiteConfig(**SUITE, gate_negatives=-1)


def test_bigbench_negatives_are_gold_choices_in_the_tasks_own_prompt(tmp_path, monkeypatch):
    tasks = {"anachronisms": choice_task("anachronisms", 6), "ruin_names": choice_task("ruin_names", 6, "\nPick: ")}
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(write_archive(tmp_path / "bigbench-1.0.0.tar.gz", tasks)))
    negatives = gate_negatives(QASuiteConfig(**SUITE, gate_negatives=5, gate_negative_tasks=list(tasks)))
    by_task = {t: [q for q in negatives if q["id"].startswith(t)] for t in tasks}
    assert [len(v) for v in by_task.values()] == [3, 2]  # split evenly, the first tasks take the remainder
    first = by_task["anachronisms"][0]
    number = first["id"].split(":")[1]
    assert first == {"id": first["id"], "prompt": f"Q: anachronisms question {number}?\nA:",
                     "answers": [f"yes {number}"]}
    assert by_task["ruin_names"][0]["prompt"].endswith("?\nPick:")


def test_unconditional_twins_follow_their_items_with_the_answer_prefix_alone(tmp_path, monkeypatch):
    """With ``gate_negatives_unconditional`` each item is followed by PMI's unconditional term of it: the same gold
    choice after the start token and the answer prefix, no prompt."""
    tasks = {"anachronisms": choice_task("anachronisms", 6), "ruin_names": choice_task("ruin_names", 6, "\nPick: ")}
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(write_archive(tmp_path / "bigbench-1.0.0.tar.gz", tasks)))
    plain = gate_negatives(QASuiteConfig(**SUITE, gate_negatives=5, gate_negative_tasks=list(tasks)))
    both = gate_negatives(QASuiteConfig(**SUITE, gate_negatives=5, gate_negative_tasks=list(tasks),
                                        gate_negatives_unconditional=True))
    assert both[::2] == plain and len(both) == 10
    for item, twin in zip(both[::2], both[1::2]):
        assert twin == {"id": item["id"] + ":unconditional", "prompt": "\nPick:" if "ruin" in item["id"] else "\nA:",
                        "answers": item["answers"], "after_bos": True}
    with pytest.raises(ConfigError, match="gate_negatives_unconditional needs gate_negative_tasks"):
        QASuiteConfig(**SUITE, gate_negatives=4, gate_negatives_unconditional=True)


def test_bigbench_negatives_refuse_the_families_the_suite_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(write_archive(tmp_path / "bigbench-1.0.0.tar.gz", {})))
    battery = {**SUITE, "battery": {"mc_tasks": ["goal_step_wikihow/goal_inference"]}}
    with pytest.raises(ConfigError, match=r"scores the task families \['goal_step_wikihow'\]"):
        gate_negatives(QASuiteConfig(**battery, gate_negatives=4,
                                     gate_negative_tasks=["goal_step_wikihow/step_ordering"]))
    checks = {**SUITE, "no_regression": {**SUITE["no_regression"], "mc_tasks": ["general_knowledge"]}}
    with pytest.raises(ConfigError, match="general_knowledge"):
        gate_negatives(QASuiteConfig(**checks, gate_negatives=4, gate_negative_tasks=["general_knowledge"]))
    with pytest.raises(ConfigError, match="needs gate_negatives > 0"):
        QASuiteConfig(**SUITE, gate_negative_tasks=["anachronisms"])
    with pytest.raises(ConfigError, match="gate_negative_tasks must be"):
        QASuiteConfig(**SUITE, gate_negatives=4, gate_negative_tasks="anachronisms")
    with pytest.raises(ConfigError, match="gate_negative_tasks must be"):
        QASuiteConfig(**SUITE, gate_negatives=4, gate_negative_tasks=[""])
