"""Presets, the three-question item builders, scoring and the report of the Memory Mosaics experiment."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memory_mosaics.experiments import tasks
from memory_mosaics.experiments.config import (
    EvalSection,
    ModelSection,
    MosaicsExperiment,
    TrainSection,
    config_path,
    load_experiment,
    presets,
)
from mlpmem.errors import ConfigError

CONFIGS = [config_path(name) for name in presets()]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_presets_load(path):
    exp = MosaicsExperiment.from_yaml(path)
    assert exp.model.mosaics_config(exp.vocab_size).short_window >= 2


def test_bad_values_are_one_line_config_errors(tmp_path):
    for make in (lambda: ModelSection(hidden_size=10, num_heads=4),
                 lambda: ModelSection(long_gap_min=9, long_gap_max=8), lambda: TrainSection(lr=0),
                 lambda: EvalSection(cloze_choices=1), lambda: MosaicsExperiment(tokenizer="x")):
        with pytest.raises(ConfigError):
            make()
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {hidden_sise: 3}\n")
    with pytest.raises(ConfigError, match="hidden_sise"):
        MosaicsExperiment.from_yaml(bad)
    exp = MosaicsExperiment.from_yaml(CONFIGS[0], ["train.steps=7"])
    assert exp.train.steps == 7
    with pytest.raises(ConfigError, match="unknown mosaics corpus 'novels'"):
        MosaicsExperiment(extra_train=["novels"])


def test_a_config_argument_is_a_yaml_file_or_a_shipped_preset(tmp_path):
    assert presets() == ["gpu", "hour", "hour-more-text", "small"]
    assert load_experiment("small") == MosaicsExperiment.from_yaml(config_path("small"))
    assert load_experiment("small", ["train.steps=7"]).train.steps == 7
    own = tmp_path / "mine.yaml"
    own.write_text("out_dir: somewhere\n")
    assert load_experiment(str(own)).out_dir == "somewhere"
    with pytest.raises(ConfigError, match="neither a YAML file path .* nor a preset"):
        load_experiment("smal")
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(str(tmp_path / "missing.yaml"))


def test_extra_training_text_and_data_settings(tmp_path, monkeypatch):
    from memory_mosaics.experiments import data
    from memory_mosaics.experiments.data import prepare_streams

    texts = {"wikipedia-by-article": "the article says the river is long. ", "shakespeare-by-play": "to be or not. "}
    monkeypatch.setattr(data, "prepare", lambda name: name)
    monkeypatch.setattr(data, "read_split",
                        lambda name, split: [{"text": texts[name] * (20 if split == "train" else 3)}])
    exp = MosaicsExperiment(out_dir=str(tmp_path / "run"), vocab_size=300)
    _, alone = prepare_streams(exp, progress=False)
    with pytest.raises(ConfigError, match="extra_train=\\[\\]"):  # the same out_dir with more text is refused
        prepare_streams(MosaicsExperiment(out_dir=exp.out_dir, vocab_size=300, extra_train=["shakespeare-by-play"]),
                        progress=False)
    more = MosaicsExperiment(out_dir=str(tmp_path / "more"), vocab_size=300, extra_train=["shakespeare-by-play"])
    _, streams = prepare_streams(more, progress=False)
    assert len(set(streams["train"][1].tolist())) == 2 == len(set(alone["train"][1].tolist())) + 1  # documents
    assert len(streams["test"][0]) > 0 and len(set(streams["test"][1].tolist())) == 1  # test: the corpus's only


def test_new_knowledge_items_bind_the_answer_to_one_document():
    items = tasks.new_knowledge_items(n_docs=6, trials=20, choices=4, seed=0)
    assert len(items) == 20
    for it in items:
        answer = it["choices"][it["label"]]
        docs, probe = it["context"].rsplit("\n\n", 1)
        assert answer in docs and len(docs.split("\n\n")) == 6
        assert sum(c in docs for c in it["choices"]) >= 2  # distractors come from the other documents first
        assert len(set(it["choices"])) == 4
        target_doc = it["context"][it["fact_at"] :].split("\n\n")[0]
        name = probe.split(" comes from")[0].split(" is on the staff")[0].split(" is a specialist")[0]
        assert answer in target_doc and name in target_doc  # fact_at points at the probed person's document
        assert it["fact_at"] == 0 or it["context"][it["fact_at"] - 2 : it["fact_at"]] == "\n\n"
    assert tasks.new_knowledge_items(6, 20, 4, seed=0) == items  # seeded


def test_new_knowledge_by_distance_bins():
    correct = np.array([True, False, True, True, False, True])
    rows = tasks.by_distance(correct, np.array([10, 63, 64, 200, 256, 5000]))
    assert [(r["from"], r["to"], r["items"]) for r in rows] == [(0, 64, 2), (64, 128, 1), (128, 256, 1), (256, None, 2)]
    assert [r["accuracy"] for r in rows] == [50.0, 100.0, 100.0, 50.0]
    assert np.isnan(tasks.by_distance(correct[:1], np.array([1]))[1]["accuracy"])


@pytest.mark.parametrize("labels", ["semantic", "anonymous"])
def test_icl_items(labels):
    cfg = EvalSection(icl_trials=10, icl_classes=3)
    for query in ("seen", "unseen"):
        for it in tasks.icl_items(2, labels, query, cfg):
            lines = it["context"].split("\n")
            assert len(lines) == 3 * 2 + 1
            word = lines[-1].removesuffix(" ->")
            demo = dict(line.split(" -> ") for line in lines[:-1])
            assert (word in demo) == (query == "seen")
            if query == "seen":
                assert demo[word] == it["choices"][it["label"]]
            if labels == "anonymous":
                assert all(c.startswith("class_") for c in it["choices"])


def test_accuracy_picks_the_highest_scoring_choice():
    items = [{"context": "a", "choices": ["x", "yy"], "label": 1}, {"context": "b", "choices": ["x", "yy"], "label": 1}]

    def scorer(pairs):  # longer continuation scores higher
        return [len(c) for _, c in pairs]

    assert tasks.accuracy(scorer, items) == 100.0
    assert tasks.accuracy(lambda pairs: [-len(c) for _, c in pairs], items) == 0.0


def test_report_writes_table_and_plot(tmp_path):
    from memory_mosaics.experiments.report import three_questions_table, write_report

    def fake(acc):
        return {"test": {"ppl": 50.0}, "cloze": acc, "train": {"tokens_per_s": 10.0, "train_seconds": 5.0},
                "new_knowledge": [{"documents": n, "tokens": 40.0 * n, "accuracy": acc} for n in (1, 4)],
                "new_knowledge_by_distance": [{"from": 0, "to": 64, "items": 3, "accuracy": acc},
                                              {"from": 64, "to": None, "items": 5, "accuracy": acc / 2}],
                "icl": [{"labels": lab, "query": q, "shots": s, "accuracy": acc}
                        for lab in ("semantic", "anonymous") for q in ("unseen", "seen") for s in (1, 2)]}

    size = {"parameters": 10, "intermediate_size": 4, "flops_per_token": {"total": 3.0, "matmul": 2.0, "context": 1.0}}
    results = {"config": MosaicsExperiment().to_dict(), "sizes": {"mosaics": size, "transformer": size},
               "models": {"mosaics": fake(60.0), "transformer": fake(30.0)}}
    table = three_questions_table(results)
    assert "| new knowledge | 4 documents (~160 tokens), accuracy % | 60.0 | 30.0 |" in table
    assert "| new knowledge | fact ≥ 64 tokens back (all lengths pooled; 5 items), accuracy % | 30.0 | 15.0 |" in table
    unscored = {**results, "models": {k: {**m, "cloze": None} for k, m in results["models"].items()}}
    unscored_row = "| persistent | cloze facts, accuracy % (4 choices) | not scored | not scored |"
    assert unscored_row in three_questions_table(unscored)  # no BIG-bench archive named
    write_report(results, tmp_path)
    assert (tmp_path / "three-questions.png").stat().st_size > 0 and "Sizes" in (tmp_path / "results.md").read_text()
    assert not (tmp_path / "training.png").exists()  # no training state: no curves
    (tmp_path / "mosaics").mkdir()
    history = [{"step": s, "loss": 8.0 - s / 10, **({"val": {"ppl": 300.0 - s}} if s % 10 == 0 else {})}
               for s in range(1, 41)]
    (tmp_path / "mosaics" / "train_state.json").write_text(json.dumps({"history": history}))
    write_report(results, tmp_path)
    assert (tmp_path / "training.png").stat().st_size > 0 and "training.png" in (tmp_path / "results.md").read_text()
