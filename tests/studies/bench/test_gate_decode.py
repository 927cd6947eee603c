"""``python -m studies bench gate`` on a copy of the finished tiny run: the gate of ``mlpmem gate`` with its decode
speed against the fixed λ in the entry and the report; bad timing options are one-line errors."""

from __future__ import annotations

import mlpmem.utils.shards
from helpers.runs import copy_run, corpus_of
from mlpmem.utils.shards import read_json
from studies.cli import main

TINY = "tiny"


def test_the_gate_with_its_decode_speed(tmp_path, tiny_backbone_dir, tiny_run, monkeypatch, capsys):
    copy_run(tiny_run, tmp_path / "run")
    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    common = ["--quiet", "--set", f"backbone.name={tiny_backbone_dir}", "--set", f"corpus.path={corpus_of(tiny_run)}",
              "--set", "gate.key_dim=2", "--set", f"run_dir={tmp_path / 'run'}"]
    assert main(["bench", "gate", TINY, *common, "--decode-tokens", "0"]) == 2
    assert "--decode-tokens" in capsys.readouterr().err
    assert main(["bench", "gate", TINY, *common, "--decode-tokens", "2", "--decode-rounds", "1",
                 "--report", str(tmp_path / "report")]) == 0
    assert "decode gate/fixed" in capsys.readouterr().out
    results = read_json(tmp_path / "report" / "results.json", "gate results")
    entry = results["corpora"]["run"]
    assert results["decode_ratio"] == entry["decode_ratio"] > 0 and entry["mix_ms_gate"] > 0
    assert "median ratio of the rounds" in (tmp_path / "report" / "report.md").read_text()
