"""Synthetic facts: a seeded generator of fictional people, their biographies and questions about them.

The cleanest test of whether knowledge went into a memory: every fact is invented (names, cities and
employers are made of random syllables), so the backbone cannot know it, and nothing but the training
documents can teach it.

Each entity has four attributes (birth city, birth year, employer, field). Entities are split into

  - **trained** entities: their biographies, written in ``paraphrases`` different templates, form the
    memory corpus (``corpus/train.jsonl``); two further templates, never trained on, give the
    ``validation`` and ``test`` corpus splits (perplexity of the same facts in new wording);
  - **held-out** entities: they appear in no document at all. Their questions measure chance level and
    leakage: every method that only sees the corpus must stay at chance on them.

Questions use templates distinct from every document template ("What is the birthplace of X?" vs
"X was born in <city>"). The questions of the trained entities are split *by entity* into
``validation`` (to tune λ and other knobs) and ``test``; held-out entities give ``held_out``.

API::

    bench = generate(SyntheticConfig(num_entities=300, seed=0))
    bench.documents["train"]        # [{"id", "text"}] memory corpus
    bench.questions["test"]         # [{"id", "question", "answers", "entity", "attribute"}]
    write_benchmark(bench, out_dir) # corpus/{train,validation,test}.jsonl, questions/*.jsonl, ...
    chance_accuracy(bench)          # EM of guessing one value per attribute (the held-out floor)

Everything is a pure function of the config: same seed, same bytes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlpmem.config import Config
from mlpmem.errors import ConfigError
from mlpmem.utils.io import write_jsonl

ATTRIBUTES = ("birth_city", "birth_year", "employer", "field")
FIELDS = ("marine biology", "astronomy", "linguistics", "economics", "chemistry", "architecture",
          "geology", "music theory", "mathematics", "botany", "medicine", "philosophy")
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
COMPANY_SUFFIXES = ("Labs", "Works", "Systems", "Industries", "Group", "Foundry")
CITY_SUFFIXES = ("ton", "ville", "burg", "ford", "mouth", "dale")

DOC_TEMPLATES = (
    "{name} was born in {birth_city} in {birth_year}. {name} studied {field} and later joined {employer}, "
    "where {name} still works today.",
    "Born in {birth_year} in the city of {birth_city}, {name} became known for work in {field}. "
    "{name} is employed by {employer}.",
    "{name} is a {field} researcher from {birth_city}. {name} was born in {birth_year} and works for {employer}.",
    "The staff of {employer} includes {name}, a specialist in {field}. {name} grew up in {birth_city}, "
    "where {name} was born in {birth_year}.",
    "{name}'s hometown is {birth_city}. Since finishing a degree in {field}, {name}, born {birth_year}, "
    "has been on the payroll of {employer}.",
    "Records list {name} (born {birth_year}, {birth_city}) as an expert in {field} working at {employer}.",
    "{employer} hired {name} after {name} completed training in {field}. {name} comes from {birth_city} "
    "and was born in {birth_year}.",
)
QUESTION_TEMPLATES = {
    "birth_city": ("What is the birthplace of {name}?", "Which city does {name} come from?"),
    "birth_year": ("In what year was {name} born?", "What is the year of birth of {name}?"),
    "employer": ("Which company does {name} work for?", "Who is the employer of {name}?"),
    "field": ("What is the area of expertise of {name}?", "What subject does {name} specialise in?"),
}


@dataclass
class SyntheticConfig(Config):
    num_entities: int = 300
    """Fictional people in total (trained + held-out)."""
    held_out_fraction: float = 0.2
    """Share of entities that appear in no document (their questions measure chance)."""
    validation_fraction: float = 0.25
    """Share of the trained entities whose questions form the validation split (λ tuning)."""
    paraphrases: int = 3
    """Training documents per trained entity, each in a different template."""
    num_cities: int = 24
    num_employers: int = 24
    year_range: tuple[int, int] = (1900, 1989)
    seed: int = 0

    def validate(self) -> None:
        self.year_range = tuple(self.year_range)
        if self.num_entities < 4:
            raise ConfigError(f"synthetic num_entities must be >= 4, got {self.num_entities}")
        if not 0 < self.held_out_fraction < 1 or not 0 < self.validation_fraction < 1:
            raise ConfigError("synthetic held_out_fraction and validation_fraction must be in (0, 1)")
        if not 1 <= self.paraphrases <= len(DOC_TEMPLATES) - 2:
            raise ConfigError(f"synthetic paraphrases must be in [1, {len(DOC_TEMPLATES) - 2}] "
                              f"(two templates are kept for the validation/test corpus)")
        if self.num_cities < 2 or self.num_employers < 2 or self.year_range[1] <= self.year_range[0]:
            raise ConfigError("synthetic needs >= 2 cities, >= 2 employers and a non-empty year range")


@dataclass(frozen=True)
class Entity:
    id: str
    name: str
    birth_city: str
    birth_year: str
    employer: str
    field: str


@dataclass
class SyntheticBenchmark:
    config: SyntheticConfig
    entities: list[Entity]
    trained: list[str]
    """Ids of the entities whose documents are in the corpus."""
    held_out: list[str]
    """Ids of the entities that appear in no document."""
    documents: dict[str, list[dict]] = field(default_factory=dict)
    """Corpus splits ``train`` / ``validation`` / ``test``: ``[{"id", "text"}]``."""
    questions: dict[str, list[dict]] = field(default_factory=dict)
    """Question splits ``validation`` / ``test`` / ``held_out``."""

    def values(self, attribute: str) -> list[str]:
        """The distinct values an attribute takes over all entities."""
        return sorted({getattr(e, attribute) for e in self.entities})


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(syllables)).capitalize()


def _unique(rng: random.Random, n: int, make) -> list[str]:
    seen: list[str] = []
    while len(seen) < n:
        item = make(rng)
        if item not in seen:
            seen.append(item)
    return seen


def make_entities(cfg: SyntheticConfig) -> list[Entity]:
    """``num_entities`` fictional people with unique names; values drawn from small seeded pools."""
    rng = random.Random(f"synthetic-entities:{cfg.seed}")
    cities = _unique(rng, cfg.num_cities, lambda r: _word(r, 2) + r.choice(CITY_SUFFIXES))
    employers = _unique(rng, cfg.num_employers, lambda r: f"{_word(r, 2)} {r.choice(COMPANY_SUFFIXES)}")
    names = _unique(rng, cfg.num_entities, lambda r: f"{_word(r, r.randint(2, 3))} {_word(r, 3)}")
    lo, hi = cfg.year_range
    return [Entity(id=f"e{i:04d}", name=name, birth_city=rng.choice(cities), birth_year=str(rng.randint(lo, hi)),
                   employer=rng.choice(employers), field=rng.choice(FIELDS))
            for i, name in enumerate(names)]


def document(entity: Entity, template: int) -> str:
    return DOC_TEMPLATES[template].format(**asdict(entity))


def questions_for(entity: Entity, rng: random.Random) -> list[dict]:
    """One question per attribute, each in a template drawn from that attribute's question templates."""
    out = []
    for attribute in ATTRIBUTES:
        template = rng.choice(QUESTION_TEMPLATES[attribute])
        out.append({"id": f"{entity.id}:{attribute}", "question": template.format(name=entity.name),
                    "answers": [getattr(entity, attribute)], "entity": entity.id, "attribute": attribute})
    return out


def generate(cfg: SyntheticConfig | None = None) -> SyntheticBenchmark:
    """The whole benchmark, deterministic in ``cfg`` (see the module docstring for the splits)."""
    cfg = cfg or SyntheticConfig()
    entities = make_entities(cfg)
    rng = random.Random(f"synthetic-splits:{cfg.seed}")
    order = list(range(len(entities)))
    rng.shuffle(order)
    n_held = max(1, round(len(entities) * cfg.held_out_fraction))
    held = sorted(order[:n_held])
    trained = sorted(order[n_held:])
    n_val = max(1, round(len(trained) * cfg.validation_fraction))
    val_entities = set(rng.sample(trained, n_val))
    docs: dict[str, list[dict]] = {"train": [], "validation": [], "test": []}
    for i in trained:
        e = entities[i]
        templates = rng.sample(range(len(DOC_TEMPLATES) - 2), cfg.paraphrases)
        docs["train"] += [{"id": f"{e.id}:t{t}", "text": document(e, t)} for t in templates]
        docs["validation"].append({"id": f"{e.id}:t{len(DOC_TEMPLATES) - 2}",
                                   "text": document(e, len(DOC_TEMPLATES) - 2)})
        docs["test"].append({"id": f"{e.id}:t{len(DOC_TEMPLATES) - 1}", "text": document(e, len(DOC_TEMPLATES) - 1)})
    rng.shuffle(docs["train"])  # paraphrases of one entity are not adjacent
    qrng = random.Random(f"synthetic-questions:{cfg.seed}")
    questions: dict[str, list[dict]] = {"validation": [], "test": [], "held_out": []}
    held_set = set(held)
    for i in range(len(entities)):
        split = "held_out" if i in held_set else ("validation" if i in val_entities else "test")
        questions[split] += questions_for(entities[i], qrng)
    return SyntheticBenchmark(cfg, entities, [entities[i].id for i in trained], [entities[i].id for i in held],
                              docs, questions)


def chance_accuracy(bench: SyntheticBenchmark, split: str = "held_out") -> float:
    """Expected EM of answering every question with the most common value of its attribute.

    The best an entity-blind guesser can do; held-out entities should score about this.
    """
    counts = {a: Counter(getattr(e, a) for e in bench.entities) for a in ATTRIBUTES}
    qs = bench.questions[split]
    hits = sum(counts[q["attribute"]].most_common(1)[0][0] in q["answers"] for q in qs)
    return hits / max(1, len(qs))


def write_benchmark(bench: SyntheticBenchmark, out_dir: str | Path) -> Path:
    """Write ``corpus/{train,validation,test}.jsonl``, ``questions/{validation,test,held_out}.jsonl``,
    ``entities.jsonl`` and ``meta.json`` (config, counts, chance EM) under ``out_dir``."""
    out = Path(out_dir)
    for split, rows in bench.documents.items():
        write_jsonl(out / "corpus" / f"{split}.jsonl", rows)
    for split, rows in bench.questions.items():
        write_jsonl(out / "questions" / f"{split}.jsonl", rows)
    write_jsonl(out / "entities.jsonl", [asdict(e) for e in bench.entities])
    meta = {"config": asdict(bench.config), "entities": len(bench.entities), "trained": len(bench.trained),
            "held_out": len(bench.held_out), "documents": {k: len(v) for k, v in bench.documents.items()},
            "questions": {k: len(v) for k, v in bench.questions.items()},
            "chance_em": {k: chance_accuracy(bench, k) for k in bench.questions}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out
