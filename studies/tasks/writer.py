"""lm-eval task files from rows of data: one JSON lines file and one YAML per task, group YAMLs, ``utils.py``.

Every task reads its rows through the ``datasets`` ``json`` builder (``dataset_path: json``,
``dataset_kwargs.data_files``), so nothing is fetched from the hub; the builder's cache is kept inside the
task folder (``.hf-datasets/``) and removed when the folder is written again.

Two kinds of task:

- **multiple choice** (:func:`choice_spec`): rows ``{"id", "prompt", "choices", "label"}``;
  the continuation of each choice is ``delimiter + choice``, where ``delimiter`` holds the task's answer
  prefix (``"\\nA: "``). lm-eval's ``acc_mutual_info`` scores log p(delimiter + c | prompt) −
  log p(delimiter + c | BOS). Both terms start with the same answer-prefix tokens, so each choice's score
  differs from the domain-conditional PMI log p(c | prompt, prefix) − log p(c | prefix) (Holtzman et al.,
  2021; the premise is the answer prefix) by one constant per item, and the argmax, hence the accuracy,
  is that of domain-conditional PMI. ``acc`` is the plain log-likelihood choice, which the same constant
  does not change either. (``acc_norm`` would be changed by it and is not reported.)
- **generation** (:func:`generation_spec`): rows ``{"id", "question", "answers"}``, greedy decoding after
  ``Question: ...\\nAnswer:`` (or the bare cloze text) with fixed format demonstrations, scored by
  ``utils.py`` (:mod:`studies.tasks.scoring`): the answer cut and SQuAD EM / F1 of the QA suite.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from mlpmem.errors import ConfigError
from mlpmem.utils.io import write_jsonl

DATA_DIR = "data"
HF_CACHE = ".hf-datasets"
MANIFEST = "manifest.json"
QA_DATA = "qa-data"
"""Where QA questions are generated when the QA suite has not written its own data."""
UTILS = '''"""lm-eval hooks of the local tasks (written by ``python -m studies tasks prepare``)."""

from studies.tasks.scoring import process_cloze, process_qa  # noqa: F401
'''
MEAN = {"aggregation": "mean", "higher_is_better": True}


class _Dumper(yaml.SafeDumper):
    """Safe YAML with every string that holds a newline written double-quoted (``"\\nA: "``), not folded."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if "\n" in text else None)


_Dumper.add_representer(str, _string)


def _dump(config: dict) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)


def reset_folder(out: Path) -> Path:
    """``out`` ready to be (re)written: what an earlier ``prepare`` wrote there (``mlpmem_*.yaml``, ``utils.py``,
    the data, the stale ``datasets`` cache) removed, and a manifest marking it unfinished until
    :func:`write_manifest`; a non-empty folder without a manifest is refused (it is not ours)."""
    manifest = out / MANIFEST
    if out.is_dir() and any(out.iterdir()) and not manifest.is_file():
        raise ConfigError(f"{out} is not empty and holds no {MANIFEST}: not a task folder of "
                          "python -m studies tasks prepare")
    for path in out.glob("mlpmem_*.yaml"):
        path.unlink()
    for folder in (HF_CACHE, DATA_DIR, QA_DATA):
        shutil.rmtree(out / folder, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"complete": False}) + "\n")
    (out / "utils.py").write_text(UTILS)
    return out


def write_manifest(out: Path, info: dict) -> Path:
    """``out/manifest.json``: ``info`` plus the task files written, marked complete."""
    files = sorted(p.name for p in out.glob("mlpmem_*.yaml"))
    path = out / MANIFEST
    path.write_text(json.dumps({"complete": True, **info, "files": files}, indent=1, ensure_ascii=False) + "\n")
    return path


def choice_spec(delimiter: str, metric: str = "acc_mutual_info") -> dict:
    """A multiple-choice task scored by log-likelihood (``acc``) and by ``metric``: PMI (``acc_mutual_info``) or the
    length-normalised log-likelihood (``acc_norm``)."""
    return {"output_type": "multiple_choice", "doc_to_text": "prompt",
            "doc_to_choice": "choices", "doc_to_target": "label", "target_delimiter": delimiter,
            "metric_list": [{"metric": "acc", **MEAN}, {"metric": metric, **MEAN}]}


def generation_spec(prompt: str, demonstrations: list[dict], until: list[str], max_gen_toks: int) -> dict:
    """A greedy generation task with ``demonstrations`` (``[{"question", "answers"}]``) as few-shot examples."""
    spec = {"output_type": "generate_until", "doc_to_text": prompt, "doc_to_target": "{{answers[0]}}",
            "target_delimiter": " ", "fewshot_delimiter": "\n\n", "num_fewshot": len(demonstrations),
            "generation_kwargs": {"until": until, "max_gen_toks": max_gen_toks, "do_sample": False},
            "metric_list": [{"metric": "em", **MEAN}, {"metric": "f1", **MEAN}]}
    if demonstrations:
        spec["fewshot_config"] = {"sampler": "first_n", "samples": demonstrations}
    return spec


def write_task(out: Path, name: str, rows: list[dict], spec: dict, metadata: dict,
               process_results: str | None = None) -> Path:
    """``out/data/<name>.jsonl`` and ``out/<name>.yaml`` (``process_results``: a function of ``utils.py``)."""
    data = out / DATA_DIR / f"{name}.jsonl"
    write_jsonl(data, rows)
    config = {"task": name, "dataset_path": "json",
              "dataset_kwargs": {"data_files": {"test": str(data.resolve())},
                                 "cache_dir": str((out / HF_CACHE).resolve())},
              "test_split": "test", **spec, "metadata": {"version": 1, **metadata}}
    text = _dump(config)
    if process_results:
        text += f"process_results: !function utils.{process_results}\n"
    path = out / f"{name}.yaml"
    path.write_text(text)
    return path


def write_group(out: Path, name: str, tasks: list[str], metrics: list[str]) -> Path:
    """A group YAML whose scores are the unweighted mean of its tasks' ``metrics``."""
    config = {"group": name, "task": tasks,
              "aggregate_metric_list": [{"metric": m, "aggregation": "mean", "weight_by_size": False}
                                        for m in metrics],
              "metadata": {"version": 1}}
    path = out / f"{name}.yaml"
    path.write_text(_dump(config))
    return path
