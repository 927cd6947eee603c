"""The paper's three questions at small scale, scored by log-likelihood of candidate continuations.

Every item is a context and K candidate continuations; the prediction is the candidate with the highest
sum of token log-probabilities (``mlpmem.evaluation.choice.continuation_logprobs``), so tiny models that cannot
follow instructions are still measured. Chance is 1/K.

1. Persistent knowledge: held-out perplexity (the test split, windows of the training length) and, where
   ``$MLPMEM_BIGBENCH_ARCHIVE`` names a copy of the BIG-bench archive, its cloze facts (``qa_wikidata``, read by
   :mod:`memory_mosaics.experiments.bigbench`): the true answer against ``cloze_choices - 1`` answers of other facts
   of the same relation (same first three words).
2. New knowledge: ``n`` biographies of fictional people (:mod:`memory_mosaics.experiments.synthetic`: names, cities and
   employers are random syllables, so only the context can teach them) in random templates, then a
   cloze probe about one of them (worded unlike any template as a whole, though it shares words with
   some; "Question: ... Answer:" prompts are beyond our tiny models); candidates: the asked attribute of the
   people in the context first, filled up from
   people not in it. Reported against the number of documents and the context length in tokens (which
   runs past the training length: length extrapolation).
3. In-context learning: words of ``icl_classes`` categories, ``n`` demonstrations per class
   ("word -> label" lines in random order), then a query word; labels semantic (``animal``) or
   anonymous (``class_00``..., assigned at random per trial). Two query kinds: ``unseen`` (a word of
   the class not in the demonstrations: generalisation, as in the paper) and ``seen`` (one of the
   demonstrated words: in-context lookup of the label).
"""

from __future__ import annotations

import random

import numpy as np

from memory_mosaics.experiments.bigbench import qa_wikidata
from memory_mosaics.experiments.config import EvalSection
from memory_mosaics.experiments.synthetic import DOC_TEMPLATES, SyntheticConfig, document, make_entities

PROBES = {
    "birth_city": "{name} comes from the city of",
    "employer": "{name} is on the staff of",
    "field": "{name} is a specialist in",
}
CATEGORIES = {
    "animal": "dog cat horse cow sheep goat pig mouse rabbit lion tiger bear wolf fox deer monkey",
    "color": "red blue green yellow black white orange purple pink brown grey violet golden silver crimson cyan",
    "country": "France Germany Spain Italy China Japan India Brazil Canada Mexico Egypt Kenya Peru Chile Norway Greece",
    "food": "bread cheese rice soup apple banana cake butter pasta salad meat fish sugar honey milk egg",
    "body": "hand foot head arm leg eye ear nose mouth heart tooth knee neck finger shoulder skin",
    "number": "one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty",
}


def choose(scorer, items: list[dict]) -> np.ndarray:
    """Index of the best-scoring candidate of each item ``{"context", "choices"}``."""
    pairs = [(it["context"], " " + c) for it in items for c in it["choices"]]
    scores = np.asarray(scorer(pairs), dtype=np.float64)
    out, at = [], 0
    for it in items:
        out.append(int(np.argmax(scores[at : at + len(it["choices"])])))
        at += len(it["choices"])
    return np.asarray(out)


def correct(scorer, items: list[dict]) -> np.ndarray:
    """Whether the best-scoring candidate of each item is its label (bool per item)."""
    return choose(scorer, items) == np.asarray([it["label"] for it in items])


def accuracy(scorer, items: list[dict]) -> float:
    if not items:
        return float("nan")
    return float(100.0 * np.mean(correct(scorer, items)))


def _shuffle_choices(rng: random.Random, answer: str, others: list[str]) -> tuple[list[str], int]:
    choices = [answer, *others]
    rng.shuffle(choices)
    return choices, choices.index(answer)


# ---------------------------------------------------------------------------------------------
# 1. Persistent knowledge: cloze facts


def cloze_items(cfg: EvalSection, seed: int = 0) -> list[dict]:
    """qa_wikidata facts as multiple choice against answers of other facts of the same relation."""
    facts = [f for f in qa_wikidata(seed=seed) if f["answers"] and f["answers"][0].strip()]
    relation = {f["id"]: " ".join(f["question"].split()[:3]) for f in facts}
    pools: dict[str, list[str]] = {}
    for f in facts:
        pools.setdefault(relation[f["id"]], []).append(f["answers"][0].strip())
    rng = random.Random(f"mosaics-cloze:{seed}")
    items = []
    for f in facts:
        answer = f["answers"][0].strip()
        pool = sorted(set(pools[relation[f["id"]]]) - set(a.strip() for a in f["answers"]))
        if len(pool) < cfg.cloze_choices - 1:
            continue
        choices, label = _shuffle_choices(rng, answer, rng.sample(pool, cfg.cloze_choices - 1))
        items.append({"context": f["question"].strip(), "choices": choices, "label": label})
        if len(items) == cfg.cloze_items:
            break
    return items


# ---------------------------------------------------------------------------------------------
# 2. New knowledge: documents, then a question about one of them


def new_knowledge_items(n_docs: int, trials: int, choices: int, seed: int = 0) -> list[dict]:
    """``trials`` contexts of ``n_docs`` fictional biographies and a probe about one of them."""
    people = make_entities(SyntheticConfig(num_entities=400, num_cities=60, num_employers=60, seed=seed))
    rng = random.Random(f"mosaics-new-knowledge:{seed}:{n_docs}")
    items = []
    for _ in range(trials):
        group = rng.sample(people, n_docs)
        target, attribute = rng.choice(group), rng.choice(sorted(PROBES))
        docs = [document(p, rng.randrange(len(DOC_TEMPLATES))) for p in group]
        answer = getattr(target, attribute)
        in_context = sorted({getattr(p, attribute) for p in group} - {answer})
        outside = sorted({getattr(p, attribute) for p in people} - {answer} - set(in_context))
        others = rng.sample(in_context, min(len(in_context), choices - 1))
        others += rng.sample(outside, choices - 1 - len(others))
        context = "\n\n".join(docs) + "\n\n" + PROBES[attribute].format(name=target.name)
        options, label = _shuffle_choices(rng, answer, others)
        fact_at = sum(len(d) + 2 for d in docs[: group.index(target)])  # character offset of the target document
        items.append({"context": context, "choices": options, "label": label, "fact_at": fact_at})
    return items


DISTANCE_BINS = (64, 128, 256)
"""Upper edges (tokens from the start of the target document to the end of the question) of the distance bins."""


def by_distance(correct: np.ndarray, distances: np.ndarray, bins=DISTANCE_BINS) -> list[dict]:
    """Accuracy of new-knowledge items grouped by how far back the fact is: ``[lo, hi)`` tokens per bin."""
    edges = [0, *bins, np.inf]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (distances >= lo) & (distances < hi)
        out.append({"from": int(lo), "to": None if np.isinf(hi) else int(hi), "items": int(inside.sum()),
                    "accuracy": float(100.0 * correct[inside].mean()) if inside.any() else float("nan")})
    return out


# ---------------------------------------------------------------------------------------------
# 3. In-context learning: classification from n demonstrations per class


def icl_items(n_shots: int, labels: str, query: str, cfg: EvalSection, seed: int = 0) -> list[dict]:
    """Prompts of ``n_shots`` demonstrations per class and one query; ``labels`` semantic|anonymous."""
    rng = random.Random(f"mosaics-icl:{seed}:{n_shots}:{labels}:{query}")
    items = []
    for _ in range(cfg.icl_trials):
        classes = rng.sample(sorted(CATEGORIES), cfg.icl_classes)
        names = classes if labels == "semantic" else [f"class_{i:02d}" for i in rng.sample(range(100), len(classes))]
        demos, unseen = [], {}
        for cls, name in zip(classes, names):
            words = rng.sample(CATEGORIES[cls].split(), n_shots + 1)
            demos += [(w, name) for w in words[:n_shots]]
            unseen[cls] = words[n_shots]
        rng.shuffle(demos)
        k = rng.randrange(len(classes))
        if query == "seen" and n_shots:
            word = rng.choice([w for w, name in demos if name == names[k]])
        else:
            word = unseen[classes[k]]
        context = "".join(f"{w} -> {name}\n" for w, name in demos) + f"{word} ->"
        items.append({"context": context, "choices": list(names), "label": k})
    return items
