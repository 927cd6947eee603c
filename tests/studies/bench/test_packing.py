"""bench packing on a tiny backbone: the three variants timed, equal rows, fewer forwards packed, files written."""

from __future__ import annotations

import json

import yaml

from mlpmem.config import read_yaml
from studies.bench.packing import LONG, PACKED, UNPACKED, PackingBenchConfig, main


def test_bench_packing_end_to_end(tmp_path, tiny_backbone_dir):
    raw = read_yaml("tiny")
    raw.update(run_dir=str(tmp_path / "run"), backbone={**raw["backbone"], "name": str(tiny_backbone_dir)},
               corpus={**raw["corpus"], "block_size": 512, "stride": 256})  # several facts per row
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    cfg = PackingBenchConfig(tokens=800, repeats=1, warmup=0, agreement_tokens=150, threads=1,
                             docs_dir=str(tmp_path / "docs"))
    r = main(str(config), cfg)
    v = r["variants"]
    assert set(v) == {UNPACKED, PACKED, LONG}
    assert v[PACKED]["rows"] == v[UNPACKED]["rows"] and v[PACKED]["input_tokens"] == v[UNPACKED]["input_tokens"]
    assert v[PACKED]["forwards"] < v[UNPACKED]["forwards"]
    assert r["agreement_fp32"]["relative"] < 1e-3
    assert r["packed_over_unpacked_wall"] > 0 and r["packed_over_unpacked_cpu"] > 0
    assert json.loads((tmp_path / "docs" / "packing.json").read_text())["variants"][PACKED]["rows"] == v[PACKED]["rows"]
    assert "Packed / one window per row" in (tmp_path / "docs" / "packing.md").read_text()
