"""``python -m studies update-study`` end to end at a tiny size (a random backbone: the numbers mean nothing, the
table's rows, the report and the runs are what is checked), and the maintenance presets load."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import digest
from helpers.paths import ROOT
from mlpmem.errors import ConfigError
from mlpmem.maintenance.config import MaintenanceConfig, load_maintenance_config
from mlpmem.pipeline.config import PipelineConfig
from studies.cli import main
from studies.update.study import load_study_config
from studies.update.sweep import finished_study

STUDY_CONFIGS = ROOT / "studies" / "update" / "configs"
ROWS = {"qa_added_update_vs_retrain", "qa_old_after_update_vs_before", "cost_update_vs_retrain",
        "qa_forgotten_after_forget", "qa_kept_after_forget", "explain_top_document_is_own"}


def test_the_presets_load_and_bad_values_are_one_line_errors():
    assert load_maintenance_config("maintenance") == MaintenanceConfig()
    study = load_study_config(STUDY_CONFIGS / "study.yaml")
    assert study.synthetic["num_entities"] == 120
    train = PipelineConfig.from_yaml(study.pipeline, study.pipeline_set).train  # the recipe its report measured
    assert (train.epochs, train.eval_every, train.patience) == (3, None, None)
    large = load_study_config(STUDY_CONFIGS / "study-480.yaml")  # the table of docs/results/update
    assert large.synthetic["num_entities"] == 480 and large.update_seeds == [0, 1, 2] and large.retrain_seeds == [1, 2]
    assert load_maintenance_config(overrides=large.maintenance).update.replay_draw == "epoch"
    assert large.forget_probes and large.forget_fraction == 0.3  # the forget that meets its row
    assert load_maintenance_config(overrides=large.maintenance).forget.lr == 0.001
    with pytest.raises(ConfigError, match="update.replay_ratio"):
        load_maintenance_config(overrides=["update.replay_ratio=-1"])
    with pytest.raises(ConfigError, match="forget.target"):
        load_maintenance_config(overrides=["forget.target=nothing"])
    with pytest.raises(ConfigError, match="unknown config key"):
        load_maintenance_config(overrides=["update.replay=1"])
    with pytest.raises(ConfigError, match="not a folder name"):
        load_study_config(STUDY_CONFIGS / "study.yaml", ["update_variants={../x: [update.epochs=2]}"])
    with pytest.raises(ConfigError, match="update.epochs"):
        load_study_config(STUDY_CONFIGS / "study.yaml", ["update_variants={e0: [update.epochs=0]}"])
    with pytest.raises(ConfigError, match="from_study_table needs from_study"):
        load_study_config(STUDY_CONFIGS / "study.yaml", ["from_study_table=true"])
    with pytest.raises(ConfigError, match="retrain_seeds"):
        load_study_config(STUDY_CONFIGS / "study.yaml", ["retrain_seeds=[0]"])


def test_a_tiny_study_writes_its_table(tmp_path, tiny_backbone_dir, capsys):
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "pipeline": "tiny", "pipeline_set": [f"backbone.name={tiny_backbone_dir}"],
        "synthetic": {"num_entities": 16, "held_out_fraction": 0.25, "paraphrases": 1, "seed": 0},
        "arriving_fraction": 0.25, "batches": 2, "forget_fraction": 0.2, "forget_probes": True, "questions": 8,
        "distractors": 3,
        "max_new_tokens": 3, "explain_questions": 4, "maintenance": ["update.epochs=1", "forget.epochs=1"],
        "update_variants": {"epochs-2": ["update.epochs=2"]}}))
    out = tmp_path / "study"
    assert main(["update-study", str(config), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert set(results) == ROWS | {"details"}
    for key in ROWS:
        assert {"measure", "value", "target", "pass"} <= set(results[key]) and key in printed
    old = results["qa_old_after_update_vs_before"]["delta_points"]  # paired: the same questions before and after
    assert old["n"] == results["details"]["config"]["questions"] and old["ci95"][0] <= old["delta"] <= old["ci95"][1]
    added = results["qa_added_update_vs_retrain"]  # paired: the same questions to the updated and retrained memory
    delta = added["delta_points"]
    assert delta["delta"] == pytest.approx(added["update"] - added["retrained"], abs=0.01)
    assert delta["ci95"][0] <= delta["delta"] <= delta["ci95"][1]
    assert "added entities, updated − retrained" in (out / "report.md").read_text()
    forgotten = results["qa_forgotten_after_forget"]  # two groups of questions: resampled apart
    held = forgotten["vs_held_out"]
    assert held["delta"] == pytest.approx(forgotten["value"] - forgotten["held_out"], abs=0.01)
    assert held["ci95"][0] <= held["delta"] <= held["ci95"][1] and forgotten["vs_unseen"]["n"] >= 1
    assert "forgotten entities after forget − the held-out entities" in (out / "report.md").read_text()
    doc = forgotten["document_form"]  # the same entities asked in their documents' words, before and after
    scores = results["details"]["scores"]
    assert doc["after"] == scores["forgotten"]["forgotten_document"]["choice"]
    assert doc["before"] == scores["updated"]["forgotten_document"]["choice"]
    assert doc["held_out"] == scores["forgotten"]["held_out_document"]["choice"] and doc["vs_held_out"]["n"] >= 1
    assert "asked in the words of their own documents" in (out / "report.md").read_text()
    explain = results["explain_top_document_is_own"]
    assert explain["asked"] <= 4 and (explain["asked"] == 0 or 0 <= explain["neighbour_rate"] <= 1)
    assert results["cost_update_vs_retrain"]["update_s"] > 0 and results["cost_update_vs_retrain"]["retrain_s"] > 0
    ops = json.loads((out / "runs" / "updated" / "maintenance" / "manifest.json").read_text())["operations"]
    assert [op["kind"] for op in ops] == ["update", "update", "forget"]
    assert ops[-1]["counts"]["probes"] == 4 * results["details"]["groups"]["forgotten"]  # four attributes each
    report = (out / "report.md").read_text()
    assert "The forget was given probes" in report
    assert report.startswith("# Updating and forgetting a memory") and "| measure | value | target | met |" in report
    # the variant: its own copy of the first run, updated once (two batches), compared with the same retrained memory
    variant = results["details"]["variants"]["epochs-2"]
    assert variant["overrides"] == ["update.epochs=2"] and variant["update_s"] > 0 and 0 < variant["cost"]
    assert variant["added"] == pytest.approx(variant["arriving"] / added["retrained"], rel=1e-3)
    assert variant["added_delta_points"]["n"] == delta["n"] and variant["old_delta_points"]["n"] == old["n"]
    ops = json.loads((out / "runs" / "variant-epochs-2" / "maintenance" / "manifest.json").read_text())["operations"]
    assert [(op["kind"], op["config"]["epochs"]) for op in ops] == [("update", 2), ("update", 2)]
    base_ops = json.loads((out / "runs" / "updated" / "maintenance" / "manifest.json").read_text())["operations"]
    assert [op["config"]["epochs"] for op in base_ops] == [1, 1, 1]  # the study's own update and forget
    assert "## Update variants" in report and "| epochs-2 | update.epochs=2 |" in report
    assert main(["update-study", str(config), "--out", str(out), "--quiet"]) == 2  # never over a finished study
    # from_study: more recipes on the kept first run, against the same retrained memory, nothing rebuilt
    assert (out / "runs" / "first" / "train").is_dir()
    spec = yaml.safe_load(config.read_text())
    # with every recipe at two maintenance seeds and the retrained memory trained again at another seed
    spec.update(from_study=str(out), update_variants={"again-2": ["update.epochs=2"], "epochs-3": ["update.epochs=3"]},
                update_seeds=[0, 1], retrain_seeds=[1])
    config.write_text(yaml.safe_dump(spec))
    sweep_out = tmp_path / "sweep"
    assert main(["update-study", str(config), "--out", str(sweep_out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "again-2-seed1: added" in printed and "again-2 over seeds [0, 1]" in printed
    sweep = json.loads((sweep_out / "results.json").read_text())
    assert set(sweep["variants"]) == {f"{v}-seed{s}" for v in ("again-2", "epochs-3") for s in (0, 1)}
    assert sweep["variants"]["epochs-3-seed1"]["overrides"] == ["update.epochs=3", "seed=1"]
    assert not (sweep_out / "runs" / "retrained").exists()  # the finished study's, read in place
    scored = sweep["details"]["scores"]
    assert scored["retrained"]["arriving"] == results["details"]["scores"]["retrained"]["arriving"]
    assert scored["before"]["old"] == results["details"]["scores"]["before"]["old"]
    again = sweep["variants"]["again-2-seed0"]  # the same recipe on the same first run: the study's variant again
    assert (again["added"], again["old"]) == pytest.approx((variant["added"], variant["old"]))
    retrain_s = results["details"]["timings"]["retrain_s"]  # the earlier study's measured retraining
    assert again["cost"] == pytest.approx(again["update_s"] / retrain_s, abs=0.006 / retrain_s)  # update_s: 2 decimals
    # the retrained memory at seed 1: its own training on a copy of the retrained run's datastore and teacher
    seed1 = sweep_out / "runs" / "retrained-seed1"
    assert yaml.safe_load((seed1 / "config.yaml").read_text())["train"]["seed"] == (
        yaml.safe_load((out / "runs" / "retrained" / "config.yaml").read_text())["train"]["seed"] + 1)
    for name in ("teacher/manifest.json", "datastore/manifest.json"):
        assert digest(seed1 / name) == digest(out / "runs" / "retrained" / name)
    assert digest(seed1 / "memory" / "model.safetensors") != digest(out / "runs" / "retrained" / "memory" /
                                                                     "model.safetensors")
    spread = sweep["details"]["retrained_spread"]
    values = [scored["retrained"]["arriving"]["choice"], scored["retrained-seed1"]["arriving"]["choice"]]
    assert spread["n"] == 2 and spread["mean"] == pytest.approx(sum(values) / 2)
    assert again["added_vs_retrained_mean"] == pytest.approx(again["arriving"] / spread["mean"], rel=1e-6)
    recipe = sweep["details"]["recipes"]["again-2"]
    assert recipe["seeds"] == [0, 1] and recipe["added"]["mean"] == pytest.approx(
        (again["added"] + sweep["variants"]["again-2-seed1"]["added"]) / 2)
    report = (sweep_out / "report.md").read_text()
    assert report.startswith("# Update recipes on the first run of")
    assert "| epochs-3-seed1 | update.epochs=3, seed=1 |" in report
    assert "## The retrained memory at other training seeds" in report and "## Recipes over their seeds" in report
    # from_study_table: the study's own table again on a copy of that first run, its retraining reused
    spec.update(update_variants={}, update_seeds=[], retrain_seeds=[], from_study_table=True)
    config.write_text(yaml.safe_dump(spec))
    table_out = tmp_path / "table"
    assert main(["update-study", str(config), "--out", str(table_out), "--quiet"]) == 0
    table = json.loads((table_out / "results.json").read_text())
    assert set(table) == ROWS | {"details"} and not (table_out / "runs" / "retrained").exists()
    for key in ROWS - {"cost_update_vs_retrain"}:  # the same recipe on the same first run: the same table
        assert table[key]["value"] == pytest.approx(results[key]["value"]), key
    assert table["cost_update_vs_retrain"]["retrain_s"] == results["cost_update_vs_retrain"]["retrain_s"]
    assert table["details"]["timings"]["first_run_s"] == results["details"]["timings"]["first_run_s"]
    ops = json.loads((table_out / "runs" / "updated" / "maintenance" / "manifest.json").read_text())["operations"]
    assert [op["kind"] for op in ops] == ["update", "update", "forget"]
    assert not (out / "runs" / "first" / "maintenance").exists()  # the kept first run was copied, not changed
    assert f"are those of `{out}`" in (table_out / "report.md").read_text()


def test_a_sweep_needs_a_finished_study_with_the_same_data(tmp_path):
    base = load_study_config(STUDY_CONFIGS / "study.yaml", ["update_variants={e2: [update.epochs=2]}"])
    source = tmp_path / "study"
    with pytest.raises(ConfigError, match="no finished update study"):
        finished_study(dataclasses.replace(base, from_study=str(source)))
    (source / "runs" / "first").mkdir(parents=True)
    (source / "runs" / "retrained").mkdir()
    (source / "results.json").write_text(json.dumps({"details": {"config": {**base.to_dict(), "seed": 1}}}))
    with pytest.raises(ConfigError, match="seed=1"):
        finished_study(dataclasses.replace(base, from_study=str(source)))
    with pytest.raises(ConfigError, match="update_variants only"):
        finished_study(dataclasses.replace(base, from_study=str(source), update_variants={}))


def test_questions_in_document_form_stop_before_the_answer_in_the_entitys_own_document():
    from memory_mosaics.experiments.synthetic import SyntheticConfig, document, generate
    from studies.update.groups import in_document_form

    bench = generate(SyntheticConfig(num_entities=12, held_out_fraction=0.25, paraphrases=2, seed=0))
    questions = bench.questions["test"] + bench.questions["held_out"]
    asked = in_document_form(bench, questions)
    assert 0 < len(asked) <= len(questions)
    by_id = {e.id: e for e in bench.entities}
    for q in asked:
        own = [d for d in bench.documents["train"] if d["id"].startswith(q["entity"] + ":")]
        if q["entity"] in bench.held_out:
            assert not own and (q["prompt"] + " " + q["answers"][0]) in document(by_id[q["entity"]], 0)
        else:
            first = min(own, key=lambda d: int(d["id"].rsplit(":t", 1)[1]))
            assert first["text"].startswith(q["prompt"] + " " + q["answers"][0])
        assert q["answers"][0] not in q["prompt"]  # the first mention of the answer: cut before it
        original = next(x for x in questions if x["id"] == q["id"])
        assert {k: v for k, v in q.items() if k != "prompt"} == original  # same id, attribute, answers: same choices


def test_probes_ask_every_attribute_in_a_wording_no_scored_question_uses():
    from memory_mosaics.experiments.synthetic import QUESTION_TEMPLATES, SyntheticConfig, generate
    from mlpmem.inference.prompts import qa_prompt
    from studies.update.groups import PROBE_WORDINGS, probes_of

    bench = generate(SyntheticConfig(num_entities=8, seed=0))
    probes = probes_of(bench, bench.trained[:2])
    assert len(probes) == 2 * 4 and set(PROBE_WORDINGS) == set(QUESTION_TEMPLATES)
    scored = {qa_prompt(q["question"]) for split in bench.questions.values() for q in split}
    assert not scored & set(probes)
    name = next(e.name for e in bench.entities if e.id == bench.trained[0])
    assert all(name in p for p in probes[:4]) and probes[0] == qa_prompt(f"Where was {name} born?")
