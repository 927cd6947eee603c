"""The hallucination part of the QA report, read from the battery's lm-eval files: HaluEval detection (the paper's
protocol: the model judges whether a given answer, response or summary is hallucinated; balanced, chance 50 %) and
closed-book preference (the share of the benchmark's questions where the method gives the right answer a higher
log-likelihood than the hallucinated one: summed, ``acc``, and per byte, ``acc_norm``), on the questions whose
knowledge is in the memory's corpus (``test``) and on held-out ones. The right answer is nearly always the shorter
choice, so both levels measure length as much as knowledge; the section says how often it is, and which way each
method's changed choices went.

The battery files hold every task the stage scored; :func:`task_family` sorts them into the no-regression battery,
detection and preference, so that each is averaged and judged on its own.
"""

from __future__ import annotations

from mlpmem.evaluation.compare import AVERAGE, LABELS, Row, compare, per_item
from mlpmem.evaluation.stats import BootstrapConfig
from studies.qa.choice_shift import Shift, shift_table
from studies.tasks.installable import DETECT_GROUP, PREFER_GROUP

FAMILIES = ("battery", "detect", "prefer")
PAPER_DETECTION = {"dialogue": (57.18, 66.86), "qa": (53.99, 64.07), "summarization": (50.27, 52.41)}
"""HaluEval detection accuracy in the paper (Mistral-7B, main Table 3): backbone, backbone + memory."""


def task_family(task: str) -> str:
    """``detect``, ``prefer`` or ``battery`` (every other task: the no-regression battery)."""
    for family, group in (("detect", DETECT_GROUP), ("prefer", PREFER_GROUP)):
        if task.startswith(f"{group}_"):
            return family
    return "battery"


def family_rows(base: dict, methods: dict[str, dict], cfg: BootstrapConfig) -> dict[str, dict[str, list[Row]]]:
    """``{family: {method: rows}}``: each method against ``base`` (lm-eval results with samples) on the tasks of
    each family both scored, the average within the family."""
    tasks = per_item(base)
    out: dict[str, dict[str, list[Row]]] = {}
    for name, results in methods.items():
        mine = per_item(results)
        for family in FAMILIES:
            shared = [t for t in tasks if t in mine and task_family(t) == family]
            if shared:
                out.setdefault(family, {})[name] = compare(base, results, shared, cfg)
    return out


def _short(task: str) -> str:
    return task.removeprefix(f"{DETECT_GROUP}_").removeprefix(f"{PREFER_GROUP}_")


def _interval(i) -> str:
    return f"{i.estimate:.1f} [{i.low:.1f}, {i.high:.1f}]"


def _table(rows: dict[str, list[Row]], labels: dict[str, str], metric: str, extra=None) -> list[str]:
    """One line per task: n, the backbone's score and each method's with its 95 % interval, Δ and verdict."""
    methods = list(rows)
    head = ["task", "n", "backbone", *[labels.get(m, m) for m in methods],
            *[f"Δ {labels.get(m, m)} [95 % CI]" for m in methods], *([extra[0]] if extra else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = [r for r in rows[methods[0]] if r.metric == metric]
    for row in first:
        per = [next(r for r in rows[m] if r.metric == metric and r.task == row.task) for m in methods]
        cells = [_short(row.task), str(row.delta.n), _interval(row.base), *[_interval(r.method) for r in per],
                 *[f"{r.delta.estimate:+.1f} [{r.delta.low:+.1f}, {r.delta.high:+.1f}] ({r.verdict})" for r in per],
                 *([extra[1](row.task)] if extra else [])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _paper(task: str) -> str:
    base, memory = PAPER_DETECTION.get(_short(task), (None, None))
    return "—" if base is None else f"{base} → {memory}"


def _preference_intro(shorter_right: dict[str, float]) -> str:
    share = ", ".join(f"{_short(t)} {p:.1f} %" for t, p in shorter_right.items())
    return ("Closed-book preference (`mlpmem_halueval_prefer`): the question alone, the right and the hallucinated "
            "answer as the two choices; acc counts the items where the right one has the higher summed "
            "log-likelihood, acc (norm) the higher log-likelihood per byte. `test`: questions whose knowledge is in "
            "the memory's corpus; `held_out`: questions whose knowledge is in no corpus."
            + (f" The right answer is the shorter choice in {share} of the items, so acc rewards a preference for "
               "short answers and acc (norm) one for long answers: compare each method's Δ on `test` with its Δ "
               "on `held_out`, not the levels." if share else ""))


def hallucination_section(families: dict[str, dict[str, list[Row]]], labels: dict[str, str],
                          shifts: dict[str, dict[str, Shift]] | None = None,
                          shorter_right: dict[str, float] | None = None) -> str:
    """Detection and preference tables, every method against the backbone, with 95 % intervals; with ``shifts``
    (``{method: {task: Shift}}`` on the preference tasks) and ``shorter_right`` (``{task: percent}`` of items whose
    right answer is the shorter), how far length explains the preference."""
    shorter_right = shorter_right or {}
    detect, prefer = families.get("detect"), families.get("prefer")
    if not detect and not prefer:
        return "(not run: the battery scored no HaluEval detection or preference task)"
    parts = []
    if detect:
        parts += ["HaluEval detection (`mlpmem_halueval_detect`): the item's knowledge / dialogue / document, an "
                  "answer, and the question whether it is supported, judged by the log-likelihood of \" Yes\" "
                  "against \" No\"; half the items carry the hallucinated answer, so chance is 50 %. Accuracy (acc) "
                  "with its 95 % interval; the last column is the paper's Mistral-7B backbone → memory.", "",
                  *_table(detect, labels, "acc", ("paper (Mistral-7B)", _paper)), ""]
    if prefer:
        parts += [_preference_intro(shorter_right), "", "Summed log-likelihood (acc):", "",
                  *_table(prefer, labels, "acc"), "", "Per byte (acc norm):", "", *_table(prefer, labels, "acc_norm"),
                  ""]
        if shifts:
            parts += ["Items whose summed-log-likelihood choice differs from the backbone's (a mixture moves toward "
                      "the shorter choice whether or not it knows the answer, `studies.qa.choice_shift`):", "",
                      shift_table({f"{labels.get(m, m)}, {_short(t)}": {t: x} for m, by_task in shifts.items()
                                   for t, x in by_task.items()}, "backbone"), ""]
    return "\n".join(parts).rstrip()


def detection_claim(rows: list[Row]) -> tuple[str, bool | None]:
    """The memory's detection accuracy against the backbone's on every task (and the average): what ours says and
    whether it reproduces the paper's rise (above on every task by its paired interval)."""
    acc = [r for r in rows if r.metric == "acc" and r.task != AVERAGE]
    if not acc:
        return "not scored", None
    text = "; ".join(f"{_short(r.task)} {r.base.estimate:.1f} → {r.method.estimate:.1f} "
                     f"(Δ {r.delta.estimate:+.1f} [{r.delta.low:+.1f}, {r.delta.high:+.1f}])" for r in acc)
    return f"HaluEval detection {LABELS['acc']}: {text}", all(r.delta.low > 0 for r in acc)
