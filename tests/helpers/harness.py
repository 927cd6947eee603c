"""The lm-eval adapter's tests: a 3-item local task, lm-eval run on it offline, log-probs computed directly."""

from __future__ import annotations

import json

import torch
from lm_eval import simple_evaluate

from mlpmem.evaluation.harness import task_manager

DOCS = [
    {"context": "The old lighthouse keeper", "target": " walked along the shore",
     "text": "The keeper lit the lamp early and watched the waves break on the rocks."},
    {"context": "He counted the gulls", "target": " and the boats", "text": "In spring the fishermen returned."},
    {"context": "When the storm came in November,", "target": " the boats stayed home",
     "text": "He wrote their numbers in a small green book."},
]
TASKS = {
    "tiny_ll": "output_type: loglikelihood\ndoc_to_text: '{{context}}'\ndoc_to_target: '{{target}}'\n"
               "target_delimiter: ''\nmetric_list: [{metric: acc}]\n",
    "tiny_roll": "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
                 "metric_list: [{metric: word_perplexity}]\n",
}

MC_ITEMS = [
    {"context": "The old lighthouse keeper", "choices": ["walked", "walked along the shore at dawn", "sang", "."],
     "label": 1},
    {"context": "He counted the gulls", "choices": [" and the boats", " twice", " in a small green book"],
     "label": 0},
    {"context": "When the storm came in November,", "choices": ["the boats stayed home", "nothing"], "label": 0},
]
MC_TASK = ("output_type: multiple_choice\ndoc_to_text: '{{context}}'\ndoc_to_choice: choices\n"
           "doc_to_target: label\ntarget_delimiter: ' '\nmetric_list: [{metric: acc},\n"
           "  {metric: acc_mutual_info, aggregation: mean, higher_is_better: true}]\n")
"""Multiple choice over :data:`MC_ITEMS`: choices of one and of several tokens, PMI's unconditional requests."""


def write_task(folder, name: str, body: str, data) -> None:
    """A task YAML reading ``data`` (a JSON lines file) through datasets' ``json`` builder, cached in ``folder``."""
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files: {{test: '{data}'}}\n"
        f"  cache_dir: '{folder / 'cache'}'\ntest_split: test\n{body}")


def write_tasks(folder) -> None:
    """:data:`DOCS` as ``docs.jsonl`` and the :data:`TASKS` on it, in ``folder``."""
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    for name, body in TASKS.items():
        write_task(folder, name, body, data)


def write_mc_task(folder):
    """``tiny_mc``: :data:`MC_ITEMS` scored by accuracy and PMI accuracy, in ``folder`` (returned)."""
    data = folder / "items.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in MC_ITEMS))
    write_task(folder, "tiny_mc", MC_TASK, data)
    return folder


def generation_task(folder, stop: str, data, max_gen_toks: int = 8) -> None:
    """``tiny_gen``: greedy generation after each context, cut at ``stop``."""
    write_task(folder, "tiny_gen", "output_type: generate_until\ndoc_to_text: '{{context}}'\n"
               f"doc_to_target: '{{{{target}}}}'\ngeneration_kwargs: {{until: [{json.dumps(stop)}], "
               f"max_gen_toks: {max_gen_toks}, do_sample: false}}\nmetric_list: [{{metric: exact_match}}]\n", data)


def mc_responses(lm, folder) -> list:
    """Every request's (log-likelihood, greedy) of every ``tiny_mc`` item in ``folder``, in item order (choices,
    then PMI's unconditional requests)."""
    out = simple_evaluate(model=lm, tasks=["tiny_mc"], task_manager=task_manager(folder, local_only=True),
                          log_samples=True)
    return [tuple(r[0]) for s in sorted(out["samples"]["tiny_mc"], key=lambda s: s["doc_id"]) for r in s["resps"]]


def run_lambda(run_dir) -> float:
    return json.loads((run_dir / "results.json").read_text())["lambda"]


def scores(lm, tasks, names=("tiny_ll",)) -> dict[str, list]:
    """Per task, the responses of lm-eval's requests in document order."""
    out = simple_evaluate(model=lm, tasks=list(names), task_manager=task_manager(tasks, local_only=True),
                          log_samples=True)
    return {name: [s["resps"][0][0] for s in sorted(out["samples"][name], key=lambda s: s["doc_id"])]
            for name in names}


def direct_loglikelihood(forward, tokenizer, context: str, continuation: str) -> float:
    """Σ log p(continuation | context) from ``forward(ids) -> mixed log-probs (1, T, V)``, tokenized as lm-eval
    does (the whole string, split after the context's tokens)."""
    whole = tokenizer.encode(context + continuation)
    n_context = len(tokenizer.encode(context))
    with torch.no_grad():
        logp = forward(torch.tensor([whole]))[0, n_context - 1 : -1]  # (T_cont, V)
    return logp.gather(1, torch.tensor(whole[n_context:])[:, None]).sum().item()


def greedy_text(model, tokenizer, prompt: str, max_new_tokens: int = 8) -> str:
    """``model``'s greedy continuation of ``prompt``, decoded as lm-eval decodes it."""
    ids = model.generate(**tokenizer([prompt], return_tensors="pt"), max_new_tokens=max_new_tokens,
                         do_sample=False)
    return tokenizer.decode(ids[0, len(tokenizer.encode(prompt)):], skip_special_tokens=True)
