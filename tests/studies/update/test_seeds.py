"""Update recipes and the retrained memory over seeds: expansion, checks, spread and means."""

from __future__ import annotations

import statistics

import pytest

from mlpmem.errors import ConfigError
from studies.update.seeds import check_seeds, expand, recipe_means, retrained_spread, retrained_step


def test_expand_runs_every_variant_at_every_seed_after_its_overrides():
    variants = {"e16": ["update.epochs=16"], "e20": ["update.epochs=20"]}
    assert expand(variants, []) == variants
    assert expand(variants, [0, 2]) == {"e16-seed0": ["update.epochs=16", "seed=0"],
                                        "e16-seed2": ["update.epochs=16", "seed=2"],
                                        "e20-seed0": ["update.epochs=20", "seed=0"],
                                        "e20-seed2": ["update.epochs=20", "seed=2"]}


@pytest.mark.parametrize(("update_seeds", "retrain_seeds", "variants", "match"), [
    ([0, 0], [], {"a": []}, "distinct integers"),
    ([], [1, -1], {}, "distinct integers"),
    ([], [True], {}, "distinct integers"),
    ([], [0, 1], {}, "study's own retrained memory"),
    ([0, 1], [], {}, "give at least one variant"),
    ([0, 1], [], {"a": ["seed=3"]}, "sets a seed"),
])
def test_bad_seeds_are_one_line_errors(update_seeds, retrain_seeds, variants, match):
    with pytest.raises(ConfigError, match=match):
        check_seeds(update_seeds, retrain_seeds, variants)


def test_good_seeds_pass():
    check_seeds([0, 1, 2], [1, 2], {"a": ["update.epochs=3"]})
    check_seeds([], [], {"a": ["seed=3"]})  # a variant may set its own seed when update_seeds does not


def _choice(value: float) -> dict:
    return {"arriving": {"choice": value, "n": 4}}


def test_retrained_spread_is_the_mean_and_sd_of_every_retrained_memory():
    scores = {"before": {"old": {"choice": 50.0}}, "retrained": _choice(24.0),
              retrained_step(1): _choice(18.0), retrained_step(2): _choice(21.0), "variant-a": _choice(99.0)}
    spread = retrained_spread(scores)
    assert spread["arriving"] == {"retrained": 24.0, "retrained-seed1": 18.0, "retrained-seed2": 21.0}
    assert spread["mean"] == pytest.approx(21.0) and spread["sd"] == pytest.approx(3.0) and spread["n"] == 3
    assert retrained_spread({"retrained": _choice(24.0)}) is None  # one memory: no spread


def test_recipe_means_group_the_seeds_of_one_recipe():
    rows = {"e16-seed0": {"added": 0.9, "old": 1.0, "cost": 0.2, "added_vs_retrained_mean": None},
            "e16-seed1": {"added": 0.7, "old": 0.9, "cost": 0.2, "added_vs_retrained_mean": None},
            "e20-seed0": {"added": 0.8, "old": 0.95, "cost": 0.25, "added_vs_retrained_mean": 0.9},
            "e20-seed1": {"added": 1.0, "old": 0.85, "cost": 0.27, "added_vs_retrained_mean": 1.1},
            "single-seed0": {"added": 1.0, "old": 1.0, "cost": 0.1}, "plain": {"added": 1.0}}
    means = recipe_means(rows)
    assert set(means) == {"e16", "e20"}  # one seed, or no seed in the name: no mean
    assert means["e16"]["seeds"] == [0, 1] and "added_vs_retrained_mean" not in means["e16"]
    assert means["e16"]["added"]["mean"] == pytest.approx(0.8)
    assert means["e16"]["added"]["sd"] == pytest.approx(statistics.stdev([0.9, 0.7]))
    assert means["e20"]["added_vs_retrained_mean"]["mean"] == pytest.approx(1.0)
    assert means["e20"]["cost"]["mean"] == pytest.approx(0.26) and means["e20"]["old"]["n"] == 2
