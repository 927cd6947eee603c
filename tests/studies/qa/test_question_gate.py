"""The gate trained on question-shaped text: its rows are the answer positions of the scored prompts, exactly."""

from __future__ import annotations

import json

import torch

from helpers.tiny import memory_config_for
from mlpmem.backbone import load_backbone
from mlpmem.baselines.methods import closed_book_prompts
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.memory import MLPMemory
from mlpmem.training.gate import GateTrainConfig
from studies.qa.question_gate import ANSWER_END, answer_ids, question_gate, question_rows, start_token

QUESTIONS = [{"id": "a", "question": "Where did the keeper live?", "answers": ["by the lighthouse"]},
             {"id": "b", "question": "What did he count?", "answers": ["gulls", "birds"]},
             {"id": "c", "question": "When came the storm?", "answers": ["November"]}]


def _mixed(backbone_dir, lam: float) -> tuple[MemoryAugmentedForCausalLM, object]:
    model, tokenizer = load_backbone(str(backbone_dir))
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(model, "tiny", tokenizer=tokenizer)).eval()
    return MemoryAugmentedForCausalLM.from_parts(model, memory, lam=lam, tokenizer=tokenizer), tokenizer


def test_rows_are_the_answer_tokens_and_their_end_as_each_side_scores_them(tiny_backbone_dir):
    mixed, tokenizer = _mixed(tiny_backbone_dir, 1.0)
    prompts = closed_book_prompts(QUESTIONS)
    data = question_rows(mixed, tokenizer, QUESTIONS, closed_book_prompts)
    spans = [answer_ids(tokenizer, p, q["answers"][0]) for p, q in zip(prompts, QUESTIONS)]
    assert len(data) == sum(len(t) for _, t in spans) and data.keys is None
    assert all(tokenizer.decode(t).endswith(ANSWER_END) for _, t in spans)
    expected = {0.0: [], 1.0: []}  # the mixture at λ = 0 is the backbone, at λ = 1 the memory alone
    for lam in expected:
        mixed.lam = lam
        for prompt_ids, target in spans:
            ids = torch.tensor([prompt_ids + target])
            with torch.no_grad(), mixed.active():
                logp = torch.log_softmax(mixed.backbone(input_ids=ids).logits[0].float(), -1)  # (T, V)
            rows = torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1)
            expected[lam].append(logp[rows, torch.tensor(target)])
    torch.testing.assert_close(data.lp_lm, torch.cat(expected[0.0]).double(), atol=1e-4, rtol=0)
    torch.testing.assert_close(data.lp_mem, torch.cat(expected[1.0]).double(), atol=1e-4, rtol=0)


def test_the_gate_is_saved_with_its_questions_and_retrained_for_others(tiny_backbone_dir, tmp_path):
    mixed, tokenizer = _mixed(tiny_backbone_dir, 0.3)
    config = GateTrainConfig(max_steps=30, patience=30, key_dim=4)
    gate, summary = question_gate(tmp_path, mixed, tokenizer, QUESTIONS, closed_book_prompts, config, 0.3)
    assert not gate.uses_keys and summary["holdout_ppl_best"] <= summary["holdout_ppl_init"] + 1e-9
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["questions"] == ["a", "b", "c"] and record["init_lambda"] == 0.3
    weights = (tmp_path / "gate.safetensors").stat().st_mtime_ns
    again, _ = question_gate(tmp_path, mixed, tokenizer, QUESTIONS, closed_book_prompts, config, 0.3)
    assert (tmp_path / "gate.safetensors").stat().st_mtime_ns == weights  # reused, not retrained
    for a, b in zip(gate.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    question_gate(tmp_path, mixed, tokenizer, QUESTIONS[:2], closed_book_prompts, config, 0.3)
    assert json.loads((tmp_path / "gate.json").read_text())["questions"] == ["a", "b"]


def test_an_item_with_its_own_prompt_is_scored_in_it(tiny_backbone_dir):
    """A negative that brings its prompt (a BIG-bench item) gives the rows of that prompt; the others keep theirs."""
    mixed, tokenizer = _mixed(tiny_backbone_dir, 0.5)
    own = {"id": "n", "prompt": "Q: Is the moon made of cheese?\nA:", "answers": ["no"]}
    prompts = closed_book_prompts(QUESTIONS)
    mixed_in = question_rows(mixed, tokenizer, [QUESTIONS[0], own, *QUESTIONS[1:]], closed_book_prompts)
    alone = question_rows(mixed, tokenizer, [own], closed_book_prompts)
    asked = question_rows(mixed, tokenizer, QUESTIONS, closed_book_prompts)
    first = len(answer_ids(tokenizer, prompts[0], QUESTIONS[0]["answers"][0])[1])
    torch.testing.assert_close(mixed_in.lp_lm[first:first + len(alone)], alone.lp_lm)
    torch.testing.assert_close(torch.cat([mixed_in.lp_lm[:first], mixed_in.lp_lm[first + len(alone):]]), asked.lp_lm)


def test_an_item_after_the_start_token_is_scored_as_lm_evals_unconditional_term(tiny_backbone_dir):
    """``after_bos``: the rows are the answer's tokens after the start token and the bare prefix, the context lm-eval
    gives the unconditional term of ``acc_mutual_info``."""
    mixed, tokenizer = _mixed(tiny_backbone_dir, 0.5)
    item = {"id": "n:unconditional", "prompt": "\nA:", "answers": ["no"], "after_bos": True}
    data = question_rows(mixed, tokenizer, [item], closed_book_prompts)
    prompt_ids, target = answer_ids(tokenizer, "\nA:", "no")
    ids = torch.tensor([[start_token(tokenizer)] + prompt_ids + target])
    with torch.no_grad():
        logp = torch.log_softmax(mixed.backbone(input_ids=ids).logits[0].float(), -1)
    rows = torch.arange(len(prompt_ids), ids.shape[1] - 1)
    torch.testing.assert_close(data.lp_lm, logp[rows, torch.tensor(target)].double(), atol=1e-4, rtol=0)
    without = question_rows(mixed, tokenizer, [{**item, "after_bos": False}], closed_book_prompts)
    assert len(without) == len(data) and not torch.allclose(without.lp_lm, data.lp_lm)
