"""Local lm-eval tasks written by ``python -m studies tasks prepare`` from a stand-in BIG-bench archive and a tiny QA
suite.

They load in lm-eval's TaskManager offline; a tiny model's lm-eval run on 3 items gives acc and
acc_mutual_info, and each choice's lm-eval scores differ from log p(c | prompt, answer prefix) and
log p(c | BOS, answer prefix) by one constant per item (so acc_mutual_info is domain-conditional PMI); the
QA tasks' prompts are the QA suite's and their answers are cut as it cuts them; the selection rule, the
screen and ``mlpmem compare`` on two models' logged samples; refused inputs are one-line errors.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest
import torch
import torch.nn.functional as F
import yaml
from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM

from helpers.bigbench import write_archive
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from mlpmem.cli import main as mlpmem_main
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.evaluation.harness import task_manager
from mlpmem.inference.prompts import qa_prompt
from studies.cli import main
from studies.tasks import catalog
from studies.tasks.choice_tasks import eval_items, screen_items
from studies.tasks.prepare import MC_GROUP, QA_GROUP, TRUTH_GROUP, TasksConfig, prepare_tasks
from studies.tasks.scoring import process_cloze, process_qa
from studies.tasks.screen import ScreenConfig, chosen_tasks, screen

CHOICES = ("gulls", "storms", "boats")


def choice_task(n: int, choices=CHOICES, **fields) -> dict:
    """``n`` single-label items, the correct choice rotating through ``choices``."""
    examples = [{"input": f"What did the keeper count on day {i}?",
                 "target_scores": {c: int(k == i % len(choices)) for k, c in enumerate(choices)}} for i in range(n)]
    return {"examples": examples, "keywords": ["multiple choice"], **fields}


BIGBENCH = {
    "keeper": choice_task(16, task_prefix="Answer about the lighthouse."),
    "family/sub_en": choice_task(16, ("spring", "November"), keywords=["non-English"], example_output_prefix=""),
    "letters": choice_task(16, ("a", "b")),
    "small": choice_task(3),
    "truthful_qa": choice_task(8, ("the seeds pass through", "a melon grows"), task_prefix="Q: Sky?\nA: Blue.\n"),
    "qa_wikidata": {"examples": [{"input": f"The color of book {i} is", "target": ["green"]} for i in range(5)]},
    "disfl_qa": {"examples": [{"input": f"Who rang, no, who kept bell {i}?\ncontext: Bell {i % 2} was kept by Ann.",
                               "target": ["Ann"] if i < 3 else ["unknown"]} for i in range(4)]},
}
MC = ["keeper", "family/sub_en"]
NAMES = ["mlpmem_bb_keeper", "mlpmem_bb_family__sub_en"]


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("bigbench") / "bigbench-1.0.0.tar.gz", BIGBENCH)


@pytest.fixture()
def env(archive, tmp_path, monkeypatch):
    monkeypatch.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(archive))
    monkeypatch.setenv("MLPMEM_CACHE", str(tmp_path / "cache"))
    return tmp_path


def suite_yaml(folder) -> str:
    suite = {"out_dir": str(folder / "qa"), "shots": 2, "generation": {"max_new_tokens": 4, "batch_size": 4},
             "benchmarks": {"synthetic": {"pipeline": "studies/qa/configs/qa-synthetic.yaml", "tune_questions": 4,
                                          "test_questions": 5, "options": {"num_entities": 12, "seed": 0}}}}
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return str(path)


@pytest.fixture(scope="module")
def prepared(archive, tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLPMEM_BIGBENCH_ARCHIVE", str(archive))
        info = prepare_tasks(TasksConfig(out=str(root / "out"), mc_tasks=MC, mc_limit=6, qa_wikidata=3,
                                         truthfulness=["truthful_qa"], battery_limit=0, detect_limit=0,
                                         qa_config=suite_yaml(root)))
    return root / "out", info


def run(model, tokenizer, folder, tasks, limit=3) -> dict:
    lm = HFLM(pretrained=model, tokenizer=tokenizer, backend="causal", batch_size=4)
    return simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager(folder, local_only=True), limit=limit,
                           log_samples=True)


@pytest.fixture(scope="module")
def llama_results(prepared, tiny_llama, tiny_tokenizer):
    return run(tiny_llama, tiny_tokenizer, prepared[0], [MC_GROUP, QA_GROUP])


def test_prepared_tasks_load_offline(prepared):
    folder, info = prepared
    # the truthfulness task keeps all its items (8), beyond mc_limit (6)
    assert info["items"] == {**dict.fromkeys(NAMES, 6), "mlpmem_bb_truthful_qa": 8, "mlpmem_synthetic": 5,
                             "mlpmem_synthetic_held_out": 5, "mlpmem_qa_wikidata": 3}
    manager = task_manager(folder, local_only=True)
    assert {MC_GROUP, TRUTH_GROUP, QA_GROUP, *info["items"]} <= set(manager.all_tasks)
    loaded = manager.load([MC_GROUP, TRUTH_GROUP, QA_GROUP])
    assert {name: len(task.eval_docs) for name, task in loaded["tasks"].items()} == info["items"]
    assert set(loaded["group_map"][MC_GROUP]) == set(NAMES)
    assert set(loaded["group_map"][TRUTH_GROUP]) == {"mlpmem_bb_truthful_qa"}
    truth = loaded["tasks"]["mlpmem_bb_truthful_qa"]
    doc = truth.eval_docs[0]
    assert truth.doc_to_text(doc).startswith("Q: Sky?\nA: Blue.\n\nQ: What did the keeper count")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["complete"] and f"{NAMES[0]}.yaml" in manifest["files"]


def logp(model, ids: list[int], start: int) -> float:
    """Σ log p(ids[t] | ids[:t]) for t >= start."""
    with torch.no_grad():
        out = F.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)  # (T, V)
    return sum(out[t - 1, ids[t]].item() for t in range(start, len(ids)))


def test_choice_tasks_score_acc_and_domain_conditional_pmi(llama_results, tiny_llama, tiny_tokenizer):
    for name in NAMES:
        scores = llama_results["results"][name]
        assert 0 <= scores["acc,none"] <= 1 and 0 <= scores["acc_mutual_info,none"] <= 1
        samples = llama_results["samples"][name]
        assert len(samples) == 3
        for s in samples:
            choices, k = s["doc"]["choices"], len(s["doc"]["choices"])
            delimiter = s["arguments"][0][1][: -len(choices[0])]  # "\nA: " (keeper) or " " (sub_en)
            assert [a[0] for a in s["arguments"][k:]] == [""] * k  # the unconditional requests
            prompt, premise = s["arguments"][0][0], delimiter.rstrip()
            bos = [tiny_tokenizer.bos_token_id]
            cond = [logp(tiny_llama, tiny_tokenizer.encode(prompt + delimiter + c),
                         len(tiny_tokenizer.encode(prompt + premise))) for c in choices]
            prior = [logp(tiny_llama, bos + tiny_tokenizer.encode(delimiter + c),
                          1 + len(tiny_tokenizer.encode(premise))) for c in choices]
            lls = [r[0][0] for r in s["resps"]]
            shift = [a - b for a, b in zip(lls[:k], cond)]  # lm-eval's minus p(c | prompt, prefix): one constant
            shift_u = [a - b for a, b in zip(lls[k:], prior)]
            assert max(shift) - min(shift) < 1e-4 and max(shift_u) - min(shift_u) < 1e-4
            label = s["doc"]["label"]
            pmi = [a - b for a, b in zip(cond, prior)]
            assert s["acc"] == float(max(range(k), key=cond.__getitem__) == label)
            assert s["acc_mutual_info"] == float(max(range(k), key=pmi.__getitem__) == label)
    keeper = llama_results["samples"][NAMES[0]][0]
    assert keeper["arguments"][0][0].startswith("Answer about the lighthouse.\nQ: What did the keeper count")
    assert keeper["arguments"][0][1] == "\nA: gulls"


def test_qa_tasks_use_the_suites_prompt_and_answer_cut(llama_results):
    sample = llama_results["samples"]["mlpmem_synthetic"][0]
    assert sample["arguments"][0][0] == qa_prompt(sample["doc"]["question"], shots=2)
    assert sample["arguments"][0][1]["max_gen_toks"] == 4
    assert set(llama_results["results"]["mlpmem_synthetic"]) >= {"em,none", "f1,none"}
    cloze = llama_results["samples"]["mlpmem_qa_wikidata"][0]
    assert cloze["arguments"][0][0] == cloze["doc"]["question"]  # the bare cloze text, zero-shot
    assert process_qa({"answers": ["Paris"]}, ["\n Paris\nQuestion: x"]) == {"em": 1.0, "f1": 1.0}
    assert process_cloze({"answers": ["green"]}, [" green, and red"]) == {"em": 1.0, "f1": 1.0}


def test_compare_command_on_two_models(llama_results, prepared, tiny_gpt2, tiny_tokenizer, tmp_path, capsys):
    from mlpmem.evaluation.harness import write_results

    base = write_results(llama_results, tmp_path / "base.json")
    method = write_results(run(tiny_gpt2, tiny_tokenizer, prepared[0], [MC_GROUP]), tmp_path / "gpt2.json")
    assert mlpmem_main(["compare", "--base", str(base), "--method", str(method), "--names", "gpt2",
                 "--resamples", "200", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert f"| gpt2 | {NAMES[0]} | PMI | 3 |" in out and "| gpt2 | average | acc | 6 |" in out
    summary = json.loads((tmp_path / "cmp" / "compare.json").read_text())["methods"]["gpt2"]
    assert set(summary) == {*NAMES, "average"}
    assert (tmp_path / "cmp" / "delta.png").stat().st_size > 0


def test_selection_rule_and_choice_of_nine(env):
    infos = {i.name: i for i in catalog.list_multiple_choice()}
    assert set(infos) == {"keeper", "family/sub_en", "letters", "small"}
    rule = catalog.SelectionRule(min_items=10)
    assert catalog.rejection(infos["letters"], rule) == "option letters as choices"
    assert catalog.rejection(infos["small"], rule) == "fewer than 10 items"
    assert catalog.rejection(infos["family/sub_en"], rule) is None  # the English subtask of a non-English task
    assert catalog.rejection(infos["keeper"]) == "fewer than 200 items"  # the default rule
    rows = [{"task": "a/x", "passes": True, "margin_low": 1.0}, {"task": "a/y", "passes": True, "margin_low": 3.0},
            {"task": "b", "passes": True, "margin_low": 2.0}, {"task": "c", "passes": False, "margin_low": -1.0}]
    assert catalog.choose_nine(rows) == ["a/y", "b"]


def test_list_command_writes_every_task_with_its_verdict(env, capsys):
    assert main(["tasks", "list", "--all", "--out", str(env / "catalog")]) == 0
    printed = capsys.readouterr().out
    results = json.loads((env / "catalog" / "results.json").read_text())
    verdicts = {t["name"]: t["verdict"] for t in results["tasks"]}
    assert verdicts == {"keeper": "fewer than 200 items", "family/sub_en": "fewer than 200 items",
                        "letters": "fewer than 200 items", "small": "fewer than 200 items"}
    assert results["counts"] == {"fewer than 200 items": 4} and results["rule"]["min_items"] == 200
    report = (env / "catalog" / "report.md").read_text()
    assert "4 multiple-choice tasks: 4 fewer than 200 items" in report and "| keeper | 16 |" in report
    assert "4 multiple-choice tasks: 4 fewer than 200 items" in printed
    assert results["qa_sources"] == {"disfl_qa": {"paragraphs": 2, "questions": 3}, "qa_wikidata": {"facts": 5},
                                     "truthful_qa": {"items": 8}}
    assert "| disfl_qa | 2 paragraphs, 3 questions |" in report


def test_screen_uses_items_outside_the_evaluated_ones(env, tiny_backbone_dir):
    held, _, overlap = screen_items("keeper", limit=6, n=10, seed=0)
    evaluated = {i["id"] for i in eval_items("keeper", 6, 0)[0]}
    assert overlap == 0 and not {i["id"] for i in held} & evaluated
    assert screen_items("keeper", limit=10, n=10, seed=0)[2] == 4  # 16 items: 4 must come from the evaluated
    report = screen(ScreenConfig(out=str(env / "screen"), tasks=MC, items=10, mc_limit=6,
                                 backbone=str(tiny_backbone_dir), batch_size=8), progress=False)
    assert [r["task"] for r in report["rows"]] == MC and all(r["n"] == 10 for r in report["rows"])
    assert set(report["chosen"]) <= set(MC) and json.loads((env / "screen" / "screen.json").read_text()) == report


def test_prepare_command_rewrites_its_folder_and_refuses_others(env, capsys):
    out = env / "tasks"
    none = ["--battery-limit", "0", "--detect-limit", "0"]
    assert main(["tasks", "prepare", "--out", str(out), "--mc-tasks", "keeper,family/sub_en", "--mc-limit", "4",
                 "--truthfulness", "truthful_qa", *none]) == 0
    assert "| mlpmem_bb_keeper | 4 |" in capsys.readouterr().out
    assert (out / "mlpmem_bb_truthful_qa.yaml").exists()
    assert main(["tasks", "prepare", "--out", str(out), "--mc-tasks", "keeper", *none]) == 0
    assert "mlpmem_truthfulness: 0 tasks" in capsys.readouterr().out
    assert not (out / "mlpmem_bb_family__sub_en.yaml").exists()  # the earlier task is gone
    assert not (out / "mlpmem_bb_truthful_qa.yaml").exists()
    foreign = env / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a task folder"):
        prepare_tasks(TasksConfig(out=str(foreign), mc_tasks=["keeper"], battery_limit=0, detect_limit=0))
    with pytest.raises(CorpusError, match="no_such_task"):
        prepare_tasks(TasksConfig(out=str(env / "t2"), mc_tasks=["no_such_task"], battery_limit=0, detect_limit=0))
    with pytest.raises(ConfigError, match="twice"):
        TasksConfig(mc_tasks=["keeper", "keeper"])
    with pytest.raises(ConfigError, match="twice"):
        TasksConfig(mc_tasks=["truthful_qa"], truthfulness=["truthful_qa"])
    with pytest.raises(ConfigError, match="no such screen.json"):
        chosen_tasks(env / "none.json")
