"""SQuAD v1.1 normalization, exact match and F1 on known cases."""

import pytest

from studies.qa.metrics import exact_match, f1, normalize_answer, score


@pytest.mark.parametrize("raw,norm", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("an apple, a pear", "apple pear"),
    ("Theatre", "theatre"),  # 'the' only as a whole word
    ("  U.S.A.  ", "usa"),
    ("", ""),
])
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_and_f1_known_values():
    assert exact_match("the Denver Broncos", "Denver Broncos") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    assert f1("Denver", "Denver Broncos") == pytest.approx(2 / 3)  # p=1, r=1/2
    assert f1("Broncos of Denver", "the Denver Broncos") == pytest.approx(0.8)  # p=2/3, r=1
    assert f1("cat", "dog") == 0.0
    assert f1("", "") == 1.0 and f1("a", "dog") == 0.0  # 'a' normalizes to empty


def test_score_takes_best_answer():
    out = score(["Paris", "green tea"], [["paris", "Lyon"], ["tea"]])
    assert out["em"] == pytest.approx(50.0)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    with pytest.raises(ValueError):
        score(["a"], [])
