"""``memory-mosaics recall --out``: the table it prints is the report it writes, from the rows of results.json."""

from __future__ import annotations

import json

from memory_mosaics.cli import main


def test_recall_writes_its_report_and_results(tmp_path, capsys):
    assert main(["recall", "--steps", "2", "--out", str(tmp_path / "recall")]) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "recall" / "results.json").read_text())
    assert results["command"] == "memory-mosaics recall --steps 2"
    assert [(r["kind"], r["layers"]) for r in results["rows"]] == [
        ("mosaics", 1), ("transformer", 1), ("mosaics", 2), ("transformer", 2)]
    report = (tmp_path / "recall" / "report.md").read_text()
    for row in results["rows"]:
        line = f"| {row['kind']} | {row['layers']} | {row['parameters']:,} | {row['accuracy']:.1f} |"
        assert line in report and line in printed
    assert f"--out {tmp_path / 'recall'}" in report
