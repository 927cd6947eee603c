"""``python -m studies update-text``: a copy of a finished run updated with unseen "plays"; the original is left as
it was, and the held-out part of the new text gets lower memory + backbone perplexity after the update."""

from __future__ import annotations

import json

import pytest

import studies.update.text as update_text
from helpers.corpus import corpus_text
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.maintenance import digest
from mlpmem.errors import ConfigError
from studies.cli import main


def test_update_text_adds_unseen_text_to_a_copy_and_reports(run_dir, tmp_path, monkeypatch, capsys):
    text = " ".join(corpus_text(6, seed=11))
    monkeypatch.setattr(update_text, "unused_plays", lambda run, count: [("A New Play", text)][:count])
    before = digest(run_dir / "memory" / "model.safetensors")
    out = tmp_path / "study"
    assert main(["update-text", str(run_dir), "--out", str(out), "--add-tokens", "600", "--eval-tokens", "150",
                 "--set", "update.epochs=2", "--docs", str(tmp_path / "docs")]) == 0
    results = json.loads((out / "results.json").read_text())
    new, old = update_text.NEW, update_text.OLD
    assert results["plays"] == ["A New Play"] and results["update"]["added"] == 1
    assert results["before"][new]["tokens"] == results["after"][new]["tokens"] > 100
    assert results["before"][new]["backbone"] == pytest.approx(results["after"][new]["backbone"])
    assert results["after"][new]["joint"] < results["before"][new]["joint"]  # the memory took in the new text
    assert results["before"][old]["tokens"] > 0 and results["after"][old]["joint"] > 0
    assert digest(run_dir / "memory" / "model.safetensors") == before  # the original run is untouched
    assert (tmp_path / "docs" / "report.md").read_text().startswith("# Updating a Shakespeare run")
    assert "after / before" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="already holds"):
        update_text.run_update_text(run_dir, out)


def test_a_run_without_unused_plays_is_a_one_line_error(run_dir, tmp_path):
    with pytest.raises(ConfigError, match="unused plays"):
        update_text.run_update_text(run_dir, tmp_path / "study")
