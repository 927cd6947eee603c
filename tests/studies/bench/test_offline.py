"""bench offline on a tiny config: every stage timed in its own folder, FLOPs counted, peak and ratios reported."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers.corpus import write_corpus
from mlpmem.cli import main as cli_main
from mlpmem.config import read_yaml
from mlpmem.errors import ConfigError
from studies.bench.offline import OfflineBenchConfig, main
from studies.cli import main as studies_main


@pytest.fixture()
def tiny_config(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "corpus", 12)
    raw = read_yaml("tiny")
    raw.update(run_dir=str(tmp_path / "run"), backbone={**raw["backbone"], "name": str(tiny_backbone_dir)},
               corpus={**raw["corpus"], "path": str(corpus)}, train={**raw["train"], "batch_size": 16})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_bench_offline_end_to_end(tiny_config, tmp_path):
    out = tmp_path / "bench"
    cfg = OfflineBenchConfig(train_tokens=400, eval_tokens=100, forward_windows=3, train_steps=3, repeats=2,
                             warmup=1, peak_size=64, threads=1, out_dir=str(out))
    r = main(str(tiny_config), cfg, progress=False)
    assert set(r["forward_vs_keys"]["tokens_per_s"]) == {"plain forward fp32",
                                                         "key pass fp32 (layer -1, ffn_input)"}
    timings = r["stages"]["timings"]
    assert timings["keys_train"]["tokens"] <= 400 and timings["teacher"]["tokens"] == timings["keys_train"]["tokens"]
    assert r["stages"]["train"]["steps"] == 3 and r["stages"]["train"]["flops_per_token"] > 0
    # FlopCounterMode counts at least the head's forward matmul (2 * d * V per token) and less than 10x everything
    assert 2 * 32 * 160 <= r["stages"]["train"]["flops_per_token"]
    assert r["stages"]["teacher"]["bytes_per_token"] == 6 * 4 + 4  # top_k = 4 in the tiny preset
    assert 0 < r["train_fraction_of_peak"] and r["teacher_over_keys"] > 0
    assert json.loads((out / "bench-results.json").read_text())["threads"] == 1
    assert "Teacher / key-extraction time" in (out / "bench-report.md").read_text()
    assert not (tmp_path / "run").exists()  # the configured run folder is never touched


def test_bench_offline_refuses_the_run_folder(tiny_config, tmp_path):
    with pytest.raises(ConfigError, match="out_dir"):
        main(str(tiny_config), OfflineBenchConfig(out_dir=str(tmp_path / "run")), progress=False)


def test_cli_bench_offline_options(tiny_config, tmp_path, capsys):
    code = studies_main(["bench", "offline", str(tiny_config), "--quiet", "--threads", "1", "--train-tokens", "300",
                         "--train-steps", "2", "--repeats", "1", "--out", str(tmp_path / "b"),
                         "--set", "memory.num_layers=1", "--set", "train.alpha=0.3"])
    assert code == 0 and "Pipeline stages on the slice" in capsys.readouterr().out
    config = json.loads((tmp_path / "b" / "bench-results.json").read_text())["config"]
    assert config["overrides"] == ["memory.num_layers=1", "train.alpha=0.3"]
    # the overrides reach the run's config: a bad one is its one-line error, before any work
    assert studies_main(["bench", "offline", str(tiny_config), "--quiet", "--set", "train.alpha=2",
                         "--out", str(tmp_path / "c")]) == 2
    assert "alpha" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_full_size_teacher_search_compares_fp32_and_bf16(tiny_config, tmp_path):
    raw = yaml.safe_load(tiny_config.read_text())
    raw["teacher"]["index"] = {"kind": "ivf_flat", "nlist": 4, "nprobe": 4}  # the run's own index: IVF
    tiny_config.write_text(yaml.safe_dump(raw))
    assert cli_main(["datastore", str(tiny_config), "--quiet"]) == 0  # the full run's datastore, read only
    before = sorted(p.name for p in (tmp_path / "run").rglob("*"))
    cfg = OfflineBenchConfig(train_tokens=300, eval_tokens=100, forward_windows=2, train_steps=2, repeats=1,
                             warmup=0, peak_size=64, threads=1, teacher_queries=24, out_dir=str(tmp_path / "b"))
    search = main(str(tiny_config), cfg, progress=False)["full_teacher_search"]
    variants = search["variants"]
    assert search["queries"] == 24 and {"exact fp32", "exact bf16 + fp32 re-rank"} <= set(variants)
    assert variants["exact fp32"]["neighbour_recall"] == 1.0 and variants["exact fp32"]["target_tv_max"] == 0.0
    bf16 = variants["exact bf16 + fp32 re-rank"]
    assert bf16["neighbour_recall"] > 0.9 and 0 <= bf16["target_tv_mean"] <= bf16["target_tv_max"]
    assert all(v["over_keys"] > 0 for v in variants.values())
    assert {"run's ivf_flat, nprobe 4", "run's ivf_flat, nprobe 1"} <= set(variants)
    assert variants["run's ivf_flat, nprobe 4"]["neighbour_recall"] > 0.9  # every list probed (ties may swap)
    one_by_one = variants["run's ivf_flat, nprobe 4, query by query"]  # 24 queries x 4 probes < 64 x 4 lists
    assert one_by_one["neighbour_recall"] == variants["run's ivf_flat, nprobe 4"]["neighbour_recall"]
    assert "Teacher search at full size" in (tmp_path / "b" / "bench-report.md").read_text()
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == before
