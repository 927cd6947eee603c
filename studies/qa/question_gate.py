"""The learned gate trained on question-shaped text: a benchmark's validation questions and their answers.

The pipeline's gate (``mlpmem gate``) learns λ_t on the memory run's validation text, corpus prose; on a QA
prompt its features fall elsewhere and it stays nearly closed where the answer begins. With
``gate_training: questions`` the QA suite trains the same gate (same features, size and trainer,
:func:`mlpmem.training.gate.train_gate`) on what the methods are scored on: each validation question in the exact
prompt of the benchmark (demonstrations, ``Question: ...``, ``Answer:``) followed by its first gold answer and the
newline that ends it. Its rows are the positions that predict those answer tokens and that newline, so the gate
learns where the memory should speak (the answer) and where the backbone should (closing it). Only validation
questions are read, plus, with the suite's ``gate_negatives``, general knowledge that no benchmark's corpus holds
(where the backbone should speak: HaluEval QA items the suite does not read, or BIG-bench items in their own prompt,
never an item the suite scores; :mod:`studies.qa.gate_negatives`); the held-out part of them (whole
questions) stops the training early, and the test questions are scored afterwards. The gate starts as the
constant λ the fixed-λ memory chose on the same questions, and is saved under the benchmark
(``<bench>/gate-questions/``), bound to the memory by its checksum.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from mlpmem.backbone import KeyHook
from mlpmem.compute import model_device
from mlpmem.errors import MlpmemError
from mlpmem.inference.gate import Gate, gate_features
from mlpmem.inference.gate_io import load_gate, save_gate, saved_for
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.training.gate import GateData, GateTrainConfig, train_gate
from mlpmem.utils.shards import read_json

ANSWER_END = "\n"
"""What ends an answer in the prompt format (the first stop string)."""
ROWS_PER_BLOCK = 4
"""Hold out contiguous runs of this many rows: about one question's answer each, so held-out rows are mostly
whole questions the gate did not train on."""


def answer_ids(tokenizer, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids, ids of `` answer`` and its end) as generation sees them: no special tokens added."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full = tokenizer(prompt + " " + answer.strip() + ANSWER_END, add_special_tokens=False)["input_ids"]
    if full[: len(prompt_ids)] != prompt_ids:  # the answer merged into the prompt's last token
        return prompt_ids, tokenizer(" " + answer.strip() + ANSWER_END, add_special_tokens=False)["input_ids"]
    return prompt_ids, full[len(prompt_ids):]


def start_token(tokenizer) -> int:
    """The token lm-eval puts before an empty context (``HFLM.prefix_token_id``): BOS, else EOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


@torch.no_grad()
def question_rows(model: MemoryAugmentedForCausalLM, tokenizer, questions: list[dict], prompt_fn) -> GateData:
    """The gate's rows on ``questions``: features, log p_lm and log p_mem of every answer token and its end; a
    question is asked in ``prompt_fn``'s prompt unless it brings its own (``"prompt"``, after the start token
    when ``"after_bos"``)."""
    backbone, memory = model.backbone, model.memory
    param = next(memory.parameters())
    features, lp_lm, lp_mem = [], [], []
    asked = iter(prompt_fn([q for q in questions if "prompt" not in q]))  # the others bring their own prompt
    for question in questions:
        prompt = question["prompt"] if "prompt" in question else next(asked)
        prompt_ids, target = answer_ids(tokenizer, prompt, question["answers"][0])
        if question.get("after_bos"):
            prompt_ids = [start_token(tokenizer), *prompt_ids]
        ids = torch.tensor([prompt_ids + target], device=model_device(backbone))  # (1, T)
        n = len(target)
        with KeyHook(backbone, model.key_layer, model.key_site) as hook:  # the head only on the last n + 1 positions
            logits = backbone(input_ids=ids, use_cache=False, logits_to_keep=n + 1).logits[0]  # (n + 1, V)
        rows = torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1)  # the positions predicting ``target``
        lm = logits[:n].float()  # (n, V)
        mem = memory(hook.keys[0, rows].to(device=param.device, dtype=param.dtype)).float().to(lm.device)  # (n, V)
        y = torch.tensor(target, device=lm.device)[:, None]  # (n, 1)
        features.append(gate_features(lm, mem).cpu())
        lp_lm.append(F.log_softmax(lm, -1).gather(1, y)[:, 0].double().cpu())
        lp_mem.append(F.log_softmax(mem, -1).gather(1, y)[:, 0].double().cpu())
    if not features:
        raise MlpmemError("the gate on questions needs validation questions (tune_questions >= 1)")
    return GateData(torch.cat(features), torch.cat(lp_lm), torch.cat(lp_mem))


def question_gate(folder: Path, model: MemoryAugmentedForCausalLM, tokenizer, questions: list[dict], prompt_fn,
                  config: GateTrainConfig, init_lambda: float) -> tuple[Gate, dict]:
    """The gate trained on ``questions`` (validation only), or the one saved in ``folder`` for this memory and
    these questions; and its training summary."""
    ids = [q.get("id", str(i)) for i, q in enumerate(questions)]
    config = dataclasses.replace(config, key_dim=0, block=ROWS_PER_BLOCK)  # keys: the questions' form, not facts
    wanted = {"questions": ids, "init_lambda": init_lambda, "gate_train": config.to_dict()}
    wanted = json.loads(json.dumps(wanted))  # as gate.json reads back
    if saved_for(folder, model.memory):
        record = read_json(folder / "gate.json", "question gate")
        if all(record.get(k) == v for k, v in wanted.items()):
            return load_gate(folder, model.memory), record["summary"]
    data = question_rows(model, tokenizer, questions, prompt_fn)
    gate, summary = train_gate(data, config, init_lambda)
    summary = {k: v for k, v in summary.items() if k != "history"}
    save_gate(gate, folder, model.memory, extra={**wanted, "summary": summary})
    return gate, summary


@torch.no_grad()
def openness(model: MemoryAugmentedForCausalLM, tokenizer, groups: dict[str, list[dict]], prompt_fn) -> dict[str, dict]:
    """Where ``model``'s gate (at its offset and floor) opens, over the rows of each group of items: where it
    should (the answers of questions) and where it should stay closed (the negatives, in their prompt and as PMI's
    unconditional term): ``{"mean": {group: mean λ_t}, "closed": {group: fraction of rows with λ_t = 0}}``."""
    lams = {name: model.gate.lam(question_rows(model, tokenizer, items, prompt_fn).features)
            for name, items in groups.items() if items}
    return {"mean": {k: v.mean().item() for k, v in lams.items()},
            "closed": {k: (v == 0).double().mean().item() for k, v in lams.items()}}
