"""Part of ``python -m studies update-study``: QA of a run's memory on the study's questions, and how often
``explain`` names the entity's own document."""

from __future__ import annotations

import random

from memory_mosaics.experiments.synthetic import ATTRIBUTES
from mlpmem.baselines.methods import closed_book_prompts
from mlpmem.evaluation.choice import continuation_logprobs
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.prompts import qa_prompt
from mlpmem.maintenance.config import load_maintenance_config
from mlpmem.maintenance.explain import Explainer
from mlpmem.maintenance.finetune import load_memory
from mlpmem.pipeline.run import Run
from studies.qa.eval_qa import GenerationConfig, evaluate_questions
from studies.update.groups import entity_of


class Scorer:
    """QA of a run's memory mixed with the backbone at a fixed λ: multiple choice and (optionally) EM."""

    def __init__(self, bench, cfg, backbone):
        """``cfg``: the study's config (distractors, λ, EM settings)."""
        self.cfg, (self.model, self.tokenizer) = cfg, backbone
        self.values = {a: bench.values(a) for a in ATTRIBUTES}

    def choices(self, q: dict) -> list[str]:
        rng = random.Random(f"choices:{q['id']}")
        others = [v for v in self.values[q["attribute"]] if v not in q["answers"]]
        return [q["answers"][0], *rng.sample(others, min(self.cfg.distractors, len(others)))]

    def score(self, run: Run, questions: list[dict]) -> dict:
        mixed = MemoryAugmentedForCausalLM.from_parts(self.model, load_memory(run), lam=self.cfg.lam,
                                                      tokenizer=self.tokenizer)
        pairs, spans = [], []
        for q in questions:
            options = self.choices(q)
            spans.append(len(options))
            prompt = q.get("prompt") or qa_prompt(q["question"])  # a question, or its own prompt (document form)
            pairs += [(prompt, " " + option) for option in options]
        scores, correct, at = continuation_logprobs(mixed, self.tokenizer, pairs, share_context=True), [], 0
        for n in spans:
            correct.append(max(range(n), key=lambda i, s=scores[at : at + n]: s[i]) == 0)
            at += n
        out = {"choice": 100 * sum(correct) / max(1, len(correct)), "n": len(questions), "correct": correct}
        if self.cfg.em and not any("prompt" in q for q in questions):  # EM asks questions, not documents
            gen = GenerationConfig(max_new_tokens=self.cfg.max_new_tokens, batch_size=16)
            shots = self.cfg.shots
            out["em"] = evaluate_questions(mixed, self.tokenizer, questions,
                                           lambda qs: closed_book_prompts(qs, shots), gen)["em"]
        return out


def _first_is_entity(supports: list, entity: str) -> bool:
    return bool(supports) and entity_of({"id": supports[0].name}) == entity


def own_document_rate(run: Run, questions: list[dict], score: dict, limit: int) -> dict:
    """Among the correctly answered ``questions``: how often ``explain``'s first source in context of the answer's
    first token (``rate``), and its best neighbour-supported document (``neighbour_rate``), is one of the entity's
    own documents."""
    explainer = Explainer(run, load_maintenance_config().explain)
    tokenizer, own, by_neighbours, asked = run.backbone[1], 0, 0, 0
    for q, ok in zip(questions, score["correct"]):
        if not ok or asked >= limit:
            continue
        prompt = qa_prompt(q["question"])
        position = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) + 1  # the answer's first token
        rows = explainer.explain(f"{prompt} {q['answers'][0]}").rows
        row = rows[position - 1] if len(rows) >= position else None
        own += row is not None and _first_is_entity(row.next_sources, q["entity"])
        by_neighbours += row is not None and _first_is_entity(row.next_supports, q["entity"])
        asked += 1
    return {"own": own, "asked": asked, "rate": own / asked if asked else None,
            "neighbour_own": by_neighbours, "neighbour_rate": by_neighbours / asked if asked else None}
