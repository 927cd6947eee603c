"""Retrieval-side ablations (key layer depth, teacher k / T): own keystores and teacher per variant, on a tiny run."""

import json

import pytest

from helpers.corpus import write_corpus
from mlpmem.errors import ConfigError
from mlpmem.pipeline.config import PipelineConfig
from studies.ablation import (
    ALL_STUDIES,
    RETRIEVAL_STUDIES,
    run_study,
    variant_config,
)


@pytest.fixture()
def tiny_run(tmp_path, tiny_backbone_dir):
    from mlpmem.pipeline.datastore import stage_datastore
    from mlpmem.pipeline.knnlm import stage_knnlm
    from mlpmem.pipeline.run import Run
    from mlpmem.pipeline.teacher import stage_teacher

    corpus = write_corpus(tmp_path / "corpus", 10)
    cfg = PipelineConfig.from_yaml("tiny", [f"run_dir={tmp_path / 'run'}",
                                                         f"backbone.name={tiny_backbone_dir}",
                                                         f"corpus.path={corpus}", "train.epochs=1"])
    run = Run(cfg, progress=False)
    stage_datastore(run)
    stage_knnlm(run)
    stage_teacher(run)
    return run


def test_layer_study_builds_keys_per_depth(tiny_run, monkeypatch):
    import studies.ablation as ablation

    monkeypatch.setitem(ablation.RETRIEVAL_STUDIES, "layer", {"layer=0.3": {"layer": 0.3}, "layer=1.0": {"layer": 1.0}})
    rows = run_study(tiny_run, "layer", progress=False)
    assert [r["layer"] for r in rows] == [0.3, 1.0]
    base = tiny_run.path("ablations", "layer")
    shallow, last = base / "layer=0.3", base / "layer=1.0"
    assert json.loads((shallow / "datastore" / "manifest.json").read_text())["layer"] == 0
    assert (shallow / "eval" / "validation").is_dir() and not (shallow / "eval" / "test").exists()
    assert not (last / "datastore").exists() and not (last / "teacher").exists()  # the main run's, shared
    assert (shallow / "teacher" / "manifest.json").exists() and (last / "memory").is_dir()
    assert all(r["joint_ppl"] <= r["backbone_ppl"] + 1e-6 for r in rows)  # λ=0 is on the grid
    assert (base / "results.png").exists() and "layer=0.3" in (base / "results.md").read_text()


def test_teacher_study_rebuilds_the_teacher_only(tiny_run, monkeypatch):
    import studies.ablation as ablation

    studies = {"k=4": {"k": 4}, "k=8, T=10": {"k": 8, "temperature": 10.0}}
    monkeypatch.setitem(ablation.RETRIEVAL_STUDIES, "teacher", studies)
    rows = run_study(tiny_run, "teacher", progress=False)
    assert [r["variant"] for r in rows] == ["k=4", "k=8, T=10"]
    folder = tiny_run.path("ablations", "teacher", "k=4")
    assert not (folder / "datastore").exists() and (folder / "teacher").is_dir()
    manifest = json.loads((folder / "teacher" / "manifest.json").read_text())
    assert manifest["k"] == 4
    other = json.loads((tiny_run.path("ablations", "teacher", "k=8__T=10", "teacher", "manifest.json")).read_text())
    assert other["temperature"] == 10.0


def test_variant_config_takes_the_main_runs_temperature(tiny_run):
    chosen_t = json.loads(tiny_run.path("knnlm", "results.json").read_text())["chosen"]["temperature"]
    cfg = variant_config(tiny_run, tiny_run.path("x"), {"k": 4})
    assert cfg.teacher.k == 4 and cfg.teacher.temperature == chosen_t and not cfg.teacher_temperature_from_knnlm
    assert variant_config(tiny_run, tiny_run.path("x"), {"layer": 0.5}).backbone.layer == 0.5


def test_study_names():
    assert {"alpha", "size", "layer", "teacher"} <= set(ALL_STUDIES)
    assert [v["layer"] for v in RETRIEVAL_STUDIES["layer"].values()][-1] == 1.0
    with pytest.raises(ConfigError):
        run_study(None, "nope")


def test_training_study_reads_the_runs_own_memory_for_its_variant(tiny_run, monkeypatch):
    import dataclasses

    import studies.ablation as ablation
    from mlpmem.pipeline.train import stage_train

    main = stage_train(tiny_run)
    alpha = tiny_run.cfg.train.alpha
    studies = {f"alpha={alpha}": {"train.alpha": alpha}, "alpha=0.9": {"train.alpha": 0.9}, "alpha=0.1": {}}
    monkeypatch.setitem(ablation.STUDIES, "alpha", studies)
    rows = run_study(tiny_run, "alpha", progress=False, variants=[f"alpha={alpha}", "alpha=0.9"])
    base = tiny_run.path("ablations", "alpha")
    assert [r["main_run"] for r in rows] == [True, False]
    assert all(r["memory_mass80"] >= 1 for r in rows)  # the kept evaluation's sharpness
    assert not (base / f"alpha={alpha}").exists() and (base / "alpha=0.9" / "train").is_dir()
    assert not (base / "alpha=0.1").exists()  # not asked for
    assert rows[0]["joint_ppl"] == ablation.kept_evaluation(main)["joint_ppl"]
    assert rows[0]["train_seconds"] == main["train_seconds"]  # read again, its training time stands
    assert "(the run's own memory)" in (base / "results.md").read_text()
    ablation.write_study_report(tiny_run, "alpha", tiny_run.path("docs"), "python -m studies ablate X --study alpha")
    written = json.loads(tiny_run.path("docs", "results.json").read_text())
    assert written["command"] == "python -m studies ablate X --study alpha" and len(written["rows"]) == 2
    assert "(the run's own memory)" in tiny_run.path("docs", "report.md").read_text()
    # another recipe than the one the run's memory was trained with: every variant is trained
    longer = dataclasses.replace(tiny_run.cfg, train=dataclasses.replace(tiny_run.cfg.train, epochs=2))
    assert not ablation.trained_as(tiny_run, longer)
    assert ablation.trained_as(tiny_run, tiny_run.cfg)


def test_variants_of_a_study():
    from studies.ablation import study_variants

    assert list(study_variants("alpha", ["alpha=0.8", "alpha=0.2"])) == ["alpha=0.2", "alpha=0.8"]  # study order
    assert list(study_variants("teacher", ["k=16"])) == ["k=16"]
    with pytest.raises(ConfigError, match="no variant 'alpha=0.3'"):
        study_variants("alpha", ["alpha=0.3"])


def test_retrieval_variant_with_the_runs_layer_and_teacher_is_the_runs_memory(tiny_run, monkeypatch):
    import studies.ablation as ablation
    from mlpmem.pipeline.train import stage_train

    stage_train(tiny_run)
    k = tiny_run.cfg.teacher.k
    monkeypatch.setitem(ablation.RETRIEVAL_STUDIES, "teacher", {f"k={k}": {"k": k}, "k=2": {"k": 2}})
    rows = run_study(tiny_run, "teacher", progress=False)
    assert [r["main_run"] for r in rows] == [True, False]
    assert not tiny_run.path("ablations", "teacher", f"k={k}").exists()
    assert tiny_run.path("ablations", "teacher", "k=2", "memory").is_dir()


def test_seeds_study_adds_the_spread_and_the_seeds_ensemble(tiny_run, monkeypatch):
    import studies.ablation as ablation
    from mlpmem.pipeline.train import stage_train

    stage_train(tiny_run)  # seed 0: the run's own memory
    monkeypatch.setitem(ablation.STUDIES, "seeds", {f"seed={s}": {"train.seed": s} for s in (0, 1)})
    rows = run_study(tiny_run, "seeds", progress=False)
    assert [r["variant"] for r in rows][:2] == ["seed=0", "seed=1"] and rows[2]["ensemble"]
    assert rows[0]["main_run"] and rows[0]["joint_ppl"] != rows[1]["joint_ppl"]  # another seed, another memory
    assert rows[2]["trainable_parameters"] == rows[0]["trainable_parameters"] + rows[1]["trainable_parameters"]
    assert rows[2]["backbone_ppl"] == pytest.approx(rows[0]["backbone_ppl"])
    table = tiny_run.path("ablations", "seeds", "results.md").read_text()
    assert "ensemble of the 2 seeds" in table and "Seed spread over 2 seeds" in table


def test_an_ensemble_of_one_memory_twice_is_that_memory(tiny_run):
    from mlpmem.memory import MLPMemory
    from mlpmem.pipeline.train import eval_data, stage_train
    from mlpmem.training.data import evaluate
    from studies.ensemble import evaluate_ensemble

    stage_train(tiny_run)
    model, tokenizer = tiny_run.backbone
    memory = MLPMemory.from_pretrained(tiny_run.layout.memory, backbone_model=model, backbone_tokenizer=tokenizer)
    memory.eval()
    val, lambdas = eval_data(tiny_run, "validation"), tiny_run.cfg.train.eval_lambdas
    alone, twice = evaluate(memory, val, lambdas), evaluate_ensemble([memory, memory], val, lambdas)
    for key in ("memory_ppl", "joint_ppl", "memory_mass80", "backbone_ppl"):
        assert twice[key] == pytest.approx(alone[key], rel=1e-5), key
    assert twice["best_lambda"] == alone["best_lambda"]


def test_seed_spread_needs_two_seeds():
    from studies.ensemble import seed_spread

    assert seed_spread([{"seed": 0, "joint_ppl": 10.0, "memory_ppl": 12.0}]) == ""
    text = seed_spread([{"seed": 0, "joint_ppl": 10.0, "memory_ppl": 12.0},
                        {"seed": 1, "joint_ppl": 12.0, "memory_ppl": 12.0}])
    assert "memory + backbone 11.000 ± 1.414" in text and "18.18 % of the mean" in text


def test_distil_study_trains_against_the_seeds_ensemble(tiny_run, monkeypatch):
    import studies.ablation as ablation
    from mlpmem.pipeline.train import stage_train
    from mlpmem.teacher import TeacherStore

    stage_train(tiny_run)
    with pytest.raises(ConfigError, match="--study seeds"):
        run_study(tiny_run, "distil", progress=False, variants=["seeds' ensemble, alpha=0.2"])
    monkeypatch.setitem(ablation.STUDIES, "seeds", {f"seed={s}": {"train.seed": s} for s in (0, 1)})
    run_study(tiny_run, "seeds", progress=False)
    rows = run_study(tiny_run, "distil", progress=False)
    assert [r["main_run"] for r in rows] == [True, False, False, False]
    assert [r.get("knn_weight") for r in rows] == [None, 0.0, 0.0, 0.5]
    assert rows[1]["alpha"] == 0.2 and rows[2]["alpha"] == 0.6
    assert rows[1]["joint_ppl"] != rows[0]["joint_ppl"]  # another teacher, another memory
    base = tiny_run.path("ablations", "distil")
    teachers = sorted(p.name for p in base.glob("teacher-*"))
    assert len(teachers) == 2 and teachers[0].startswith("teacher-knn0-")  # built once per weight, shared
    assert TeacherStore(base / teachers[0]).manifest["source"] == "memories"
    assert (base / "seeds__ensemble__alpha=0.2" / "memory").is_dir()
