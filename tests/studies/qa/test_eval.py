"""Greedy QA decoding with stop strings over any model, λ tuning, and the question file reader."""

import json

import pytest

from mlpmem.baselines.methods import closed_book_prompts
from mlpmem.errors import CorpusError
from mlpmem.inference.prompts import qa_prompt
from studies.qa.eval_qa import (
    GenerationConfig,
    cut_at_stop,
    evaluate_questions,
    generate_answers,
    read_questions,
    tune_lambda,
)


def test_prompts_and_stops():
    assert qa_prompt("Who?") == "Question: Who?\nAnswer:"
    assert qa_prompt("Who?", ["p1", "p2"]) == "Context:\np1\n\np2\n\nQuestion: Who?\nAnswer:"
    assert cut_at_stop(" Paris\nQuestion: next") == "Paris"
    assert cut_at_stop(" Paris Question: x") == "Paris"
    assert cut_at_stop("\n Paris\nmore") == "Paris"
    assert closed_book_prompts([{"question": "The country of X is", "cloze": True}]) == ["The country of X is"]


def test_batched_greedy_matches_one_by_one(tiny_llama, tiny_tokenizer):
    prompts = ["The keeper", "The old lighthouse keeper walked along", "He counted"]
    cfg = GenerationConfig(max_new_tokens=6, batch_size=3)
    batched = generate_answers(tiny_llama, tiny_tokenizer, prompts, cfg, stops=("\n",))
    single = [generate_answers(tiny_llama, tiny_tokenizer, [p], GenerationConfig(6, 1), stops=("\n",))[0]
              for p in prompts]
    assert batched == single


def _stock(model, tokenizer, prompt: str, new_tokens: int) -> str:
    """What the backbone's own ``generate`` gives for ``prompt`` alone (no padding, no prefix cache)."""
    import torch

    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         do_sample=False, num_beams=1, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    return cut_at_stop(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True), ("\n",))


def test_prompts_sharing_demonstrations_decode_as_each_alone(tiny_llama, tiny_tokenizer):
    """The shared demonstrations run once (their cache copied into each batch, each row padded behind them):
    every row decodes what the stock ``generate`` decodes on its prompt alone."""
    from studies.qa.eval_qa import shared_prefix

    questions = [{"question": q} for q in ("Who keeps the light?", "Where?", "What did the old keeper count at dawn?")]
    prompts = closed_book_prompts(questions, shots=2)
    encoded = [tiny_tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    prefix, cache = shared_prefix(tiny_llama, encoded)
    assert len(prefix) > 10 and cache.get_seq_length() == len(prefix)
    assert all(row[:len(prefix)] == prefix for row in encoded)
    batched = generate_answers(tiny_llama, tiny_tokenizer, prompts, GenerationConfig(6, 3), stops=("\n",))
    assert batched == [_stock(tiny_llama, tiny_tokenizer, p, 6) for p in prompts]
    assert shared_prefix(tiny_llama, [[5, 6], [7, 6]]) == ([], None)  # nothing shared: whole prompts


def test_an_answer_ends_at_its_first_stop_after_leading_whitespace(tiny_tokenizer):
    import torch

    from studies.qa.eval_qa import AnswerEnded

    prompt = tiny_tokenizer("Question: Where?\nAnswer:", add_special_tokens=False)["input_ids"]
    rows = [" the shore\nQuestion", "\n the shore", " the shore"]
    encoded = [prompt + tiny_tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows]
    width = max(map(len, encoded))
    ids = torch.tensor([row + [tiny_tokenizer.eos_token_id] * (width - len(row)) for row in encoded])
    done = AnswerEnded(tiny_tokenizer, len(prompt), ("\n", "Question:"))(ids, None)
    assert done.tolist() == [True, False, False]  # a leading newline does not end the answer


def test_bf16_generation_decodes_under_autocast(tiny_llama, tiny_tokenizer):
    import torch

    from mlpmem.errors import ConfigError

    prompts = ["The keeper", "The old lighthouse keeper walked along"]
    seen = set()
    linear = next(m for m in tiny_llama.modules() if isinstance(m, torch.nn.Linear))
    handle = linear.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
    try:
        low = generate_answers(tiny_llama, tiny_tokenizer, prompts, GenerationConfig(6, 2, "bf16"), stops=("\n",))
    finally:
        handle.remove()
    assert seen == {torch.bfloat16} and len(low) == 2 and all(isinstance(t, str) for t in low)
    assert GenerationConfig().precision == "fp32"
    with pytest.raises(ConfigError, match="precision must be one of"):
        GenerationConfig(precision="fp16")


class EchoModel:
    """A 'model' whose generate appends fixed token ids: checks stop-string cutting and scoring end to end."""

    def __init__(self, tokenizer, text):
        self.ids = tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, input_ids, **kwargs):
        import torch

        return torch.cat([input_ids, torch.tensor([self.ids] * input_ids.shape[0])], 1)


def test_evaluate_questions_cuts_at_stop(tiny_tokenizer):
    qs = [{"id": "a", "question": "Where?", "answers": ["the shore"]}]
    r = evaluate_questions(EchoModel(tiny_tokenizer, " The shore\nQuestion: more"), tiny_tokenizer, qs)
    assert r["em"] == 100.0 and r["predictions"][0]["prediction"] == "The shore"


def test_tune_lambda_picks_best_and_smallest_on_ties(tiny_tokenizer):
    qs = [{"question": "Where?", "answers": ["shore"]}]
    models = {0.0: EchoModel(tiny_tokenizer, " boats"), 0.2: EchoModel(tiny_tokenizer, " shore"),
              0.5: EchoModel(tiny_tokenizer, " shore")}
    lam, curve = tune_lambda(models.__getitem__, tiny_tokenizer, qs, [0.5, 0.0, 0.2])
    assert lam == 0.2 and [c["lambda"] for c in curve] == [0.0, 0.2, 0.5]


def test_the_one_standard_error_rule_takes_the_smallest_value_the_questions_cannot_tell_from_the_best(tiny_tokenizer):
    qs = [{"id": str(i), "question": "Where?", "answers": [answer]} for i, answer in
          enumerate(["shore", "shore", "shore", "boats"])]
    models = {0.0: EchoModel(tiny_tokenizer, " shore boats"), 1.5: EchoModel(tiny_tokenizer, " shore"),
              3.0: EchoModel(tiny_tokenizer, " shore")}  # F1 2/3 on every question; 1, 1, 1, 0; the same
    best, curve = tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], key="offset")
    assert best == 1.5 and [round(c["f1"], 2) for c in curve] == [66.67, 75.0, 75.0]
    assert curve[0]["f1_se"] == 0 and curve[1]["f1_se"] == pytest.approx(25.0)  # 100 * sd(1, 1, 1, 0) / sqrt(4)
    smallest, _ = tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], key="offset", rule="one_se")
    assert smallest == 0.0  # 66.7 >= 75 - 25
    # a knob whose larger values close the gate (a floor): ties and the rule prefer the largest
    assert tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], prefer="larger")[0] == 3.0
    assert tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], rule="one_se",
                       prefer="larger")[0] == 3.0
    models[0.0] = EchoModel(tiny_tokenizer, " boats")  # 0, 0, 0, 1: 25 < 50
    assert tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], rule="one_se")[0] == 1.5
    models[3.0] = EchoModel(tiny_tokenizer, " boats")
    assert tune_lambda(models.__getitem__, tiny_tokenizer, qs, [3.0, 0.0, 1.5], rule="one_se",
                       prefer="larger")[0] == 1.5


def test_read_questions(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "Q?", "answer": "A"}) + "\n\n" + json.dumps(
        {"id": "x", "question": "R?", "answers": ["B", "C"]}) + "\n")
    rows = read_questions(path)
    assert rows[0]["answers"] == ["A"] and rows[0]["id"] == "1" and rows[1]["id"] == "x"
    path.write_text(json.dumps({"question": "Q?"}) + "\n")
    with pytest.raises(CorpusError):
        read_questions(path)


def test_shots_put_demonstrations_first_and_are_checked():
    from mlpmem.errors import ConfigError
    from mlpmem.inference.prompts import DEMONSTRATIONS, demonstrations

    two = qa_prompt("Who?", shots=2)
    q0, a0 = DEMONSTRATIONS[0]
    assert two.startswith(f"Question: {q0}\nAnswer: {a0}\n\n")
    assert two.endswith("Question: Who?\nAnswer:") and two.count("Question:") == 3
    assert qa_prompt("Who?", ["p1"], shots=1) == demonstrations(1) + "Context:\np1\n\nQuestion: Who?\nAnswer:"
    assert closed_book_prompts([{"question": "Who?"}], shots=3) == [qa_prompt("Who?", shots=3)]
    assert closed_book_prompts([{"question": "X is", "cloze": True}], shots=3) == ["X is"]  # cloze stays bare
    with pytest.raises(ConfigError, match="shots"):
        demonstrations(len(DEMONSTRATIONS) + 1)


def test_answer_ends_at_the_document_separator(tiny_tokenizer):
    """A model fine-tuned on the corpus (CPT, LoRA) ends an answer with the separator the corpus put between
    documents; the rest of the row must not run into the prediction."""
    from mlpmem.corpora.documents import doc_start_token

    model = EchoModel(tiny_tokenizer, " The shore")
    model.ids = model.ids + [doc_start_token(tiny_tokenizer)] + tiny_tokenizer(" The city", add_special_tokens=False)[
        "input_ids"]
    r = evaluate_questions(model, tiny_tokenizer, [{"question": "Where?", "answers": ["the shore"]}])
    assert r["predictions"][0]["prediction"] == "The shore" and r["em"] == 100.0
