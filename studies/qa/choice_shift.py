"""Which way a method moves multiple-choice answers against a base: toward the shorter choices or the longer.

A mixture ``(1 − λ) p_LM + λ p_mem`` gives every token the memory puts no mass on ``log(1 − λ)`` less than the
backbone does, so a choice of n such tokens loses about ``n · log(1 − λ)``: by log-likelihood accuracy the
mixture prefers shorter choices whether or not the memory knows anything about the item. Domain-conditional
PMI divides the same penalty out. This module counts, from two lm-eval results files with logged samples, the
items whose log-likelihood choice changed and whether the new choice is shorter or longer (in characters, the
length lm-eval's ``acc_norm`` uses).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mlpmem.evaluation.compare import item_key


@dataclass(frozen=True)
class Shift:
    """Items paired, how many changed their log-likelihood choice, and to a shorter / longer / equal-length one."""

    items: int = 0
    changed: int = 0
    shorter: int = 0
    longer: int = 0

    def __add__(self, other: Shift) -> Shift:
        return Shift(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values())))

    @property
    def same_length(self) -> int:
        return self.changed - self.shorter - self.longer


def choice(sample: dict) -> tuple[int, list[str]] | None:
    """The index of the choice with the highest log-likelihood, and the choices; None without them.

    lm-eval logs one response per request: the choices' conditional log-likelihoods first (PMI's unconditional
    ones after them)."""
    doc = sample.get("doc")
    choices = doc.get("choices") if isinstance(doc, dict) else None
    responses = sample.get("filtered_resps") or []
    if not choices or len(responses) < len(choices):
        return None
    lls = [float(r[0]) for r in responses[: len(choices)]]
    return max(range(len(lls)), key=lls.__getitem__), list(choices)


def length_shift(base: dict, method: dict) -> dict[str, Shift]:
    """``{task: Shift}`` of ``method`` against ``base`` (lm-eval results with samples) on the items both scored."""
    out = {}
    for task, samples in method["samples"].items():
        base_choices = {item_key(s): choice(s) for s in base["samples"].get(task, [])}
        shift = Shift()
        for sample in samples:
            mine, theirs = choice(sample), base_choices.get(item_key(sample))
            if mine is None or theirs is None:
                continue
            (i, choices), (j, _) = mine, theirs
            delta = len(choices[i]) - len(choices[j])
            shift += Shift(1, int(i != j), int(i != j and delta < 0), int(i != j and delta > 0))
        if shift.items:
            out[task] = shift
    return out


def shorter_target_share(results: dict, tasks) -> dict[str, float]:
    """``{task: percent}``: of each task's items (lm-eval results with samples), the share whose right choice
    (``doc["label"]``) is strictly the shortest in characters: how far a preference for short choices alone
    would score."""
    out = {}
    for task in tasks:
        docs = [s["doc"] for s in results["samples"].get(task, []) if isinstance(s.get("doc"), dict)]
        docs = [d for d in docs if "label" in d and d.get("choices")]
        if docs:
            shortest = sum(all(len(d["choices"][d["label"]]) < len(c) for i, c in enumerate(d["choices"])
                               if i != d["label"]) for d in docs)
            out[task] = 100.0 * shortest / len(docs)
    return out


def shift_table(shifts: dict[str, dict[str, Shift]], base_name: str = "base") -> str:
    """A markdown table: per method the items paired, the choices changed, and to shorter / longer ones."""
    lines = [f"| method | items | choice changed vs {base_name} | to a shorter choice | to a longer | same length |",
             "|---|---|---|---|---|---|"]
    for method, by_task in shifts.items():
        total = sum(by_task.values(), Shift())
        lines.append(f"| {method} | {total.items:,} | {total.changed} | {total.shorter} | {total.longer} | "
                     f"{total.same_length} |")
    return "\n".join(lines)
