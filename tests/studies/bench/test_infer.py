"""bench infer on a tiny finished run: every method measured, ratios, report and figure; ladder variants agree."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml

from helpers.runs import copy_run
from helpers.tiny import VOCAB, memory_config_for, tiny_backbone
from mlpmem.cli import main as cli_main
from mlpmem.errors import ConfigError
from mlpmem.index import IndexConfig
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.memory import MLPMemory, tie_to_backbone
from studies.bench.infer.config import InferBenchConfig
from studies.bench.infer.ladder import ladder_notes, memory_variants
from studies.bench.infer.measure import TimedMethod, machine, machine_label, measure, weight_limits
from studies.bench.infer.report import limit_text, targets
from studies.bench.infer.run import main
from studies.bench.knn_setup import KnnSetupConfig


def tied_memory(backbone):
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(backbone, "tiny", key_layer=-1, tie_head=True)).eval()
    tie_to_backbone(memory, backbone)
    with torch.no_grad():
        memory.norm.weight.mul_(30.0)
    return memory


def test_ladder_variants_compute_the_same_distribution():
    backbone = tiny_backbone("llama")
    memory = tied_memory(backbone)
    full = MemoryAugmentedForCausalLM.from_parts(backbone, memory, 0.4)
    x = torch.tensor([[5, 17, 3, 99, 42, 7], [1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        expected = full(input_ids=x, logits_to_keep=1).logits
        variants = memory_variants(backbone, memory, 0.4)
        assert set(variants) == {"memory:naive", "memory:+kept", "memory:+fused", "memory:bf16"}
        for name, variant in variants.items():
            got = variant(input_ids=x, logits_to_keep=1).logits
            tol = 0.5 if name == "memory:bf16" else 1e-5  # bf16 blocks: close, not equal
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=tol, msg=name)
    assert not variants["memory:naive"].fuse_head and variants["memory:+fused"].fuse_head


def test_measure_counts_every_generated_token():
    backbone = tiny_backbone("llama")
    calls = []
    handle = backbone.register_forward_hook(lambda m, a, o: calls.append(1))
    method = TimedMethod("backbone", prepare=lambda ids: ids[:, 1:])
    m = measure(backbone, method, torch.ones(2, 5, dtype=torch.long), 4)
    handle.remove()
    assert len(calls) == 4 and m["input_tokens"] == 4  # one prefill + 3 decode steps; prepare was applied
    assert m["ttft_s"] > 0 and m["decode_tok_s"] > 0


def test_weight_limits_of_a_tied_memory():
    backbone = tiny_backbone("llama")
    memory = tied_memory(backbone)
    lim = weight_limits(backbone, memory)
    blocks = sum(p.numel() * 4 for n, p in memory.named_parameters() if not n.startswith("head"))
    assert lim["memory_extra_bytes"] == blocks
    assert lim["head_bytes"] == VOCAB * 32 * 4
    assert lim["decode_ratio_limit_separate_heads"] < lim["decode_ratio_limit_fused"] < 1


def test_config_validation():
    with pytest.raises(ConfigError):
        InferBenchConfig(methods=["memory"])
    with pytest.raises(ConfigError):
        InferBenchConfig(new_tokens=1)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_run):
    """A copy of the session's tiny run whose config.yaml names the copy as its run folder."""
    root = tmp_path_factory.mktemp("bench")
    return root, copy_run(tiny_run, root / "run") / "config.yaml"


def test_bench_infer_end_to_end(finished_run):
    root, config = finished_run
    knn = KnnSetupConfig(sources=[str(root / "run" / "datastore")], min_keys=1, index_dir=str(root / "idx"),
                         index=IndexConfig(kind="ivf_flat", nlist=4, nprobe=4))
    cfg = InferBenchConfig(prompt_tokens=8, new_tokens=3, batch_sizes=[1, 2], repeats=2, warmup=1,
                           methods=["backbone", "memory", "knnlm", "knnlm-exact"], out_dir=str(root / "out"), knn=knn,
                           threads=1)
    results = main(str(config), cfg, progress=False)
    assert set(results["methods"]) == {"backbone", "memory", "knnlm", "knnlm-exact", "memory:naive", "memory:+kept",
                                       "memory:bf16"}
    assert set(results["methods"]["knnlm-exact"]) == {"1"}  # brute force: batch 1 only
    q = results["info"]["bf16_quality"]
    assert q["positions"] > 0 and abs(q["bf16_memory_ppl"] / q["fp32_memory_ppl"] - 1) < 0.05
    assert set(results["methods"]["memory"]) == {"1", "2"} and set(results["methods"]["memory:naive"]) == {"1"}
    assert results["ratios"]["backbone"]["1"]["decode_vs_backbone"] == 1.0
    entry = results["methods"]["knnlm"]["1"]
    assert entry["decode_tok_s"]["n"] == 2 and entry["search_s"]["median"] > 0
    assert results["info"]["knnlm"]["keys"] > 0
    assert [row[0] for row in targets(results)] == ["decode tok/s memory / backbone", "TTFT memory / backbone",
                                                    "decode tok/s memory / kNN-LM",
                                                    "decode tok/s memory / kNN-LM (exact search)"]
    saved = json.loads((root / "out" / "results.json").read_text())
    assert saved["methods"]["memory"]["2"]["input_tokens"] == 8
    assert "| memory |" in (root / "out" / "report.md").read_text()
    assert (root / "out" / "speed.png").stat().st_size > 5000


def test_bench_infer_times_the_gated_memory_beside_the_fixed_one(finished_run):
    root, config = finished_run
    run = ["--quiet", "--set", f"run_dir={root / 'run'}"]
    backbone = yaml.safe_load(config.read_text())["backbone"]["name"]
    corpus = yaml.safe_load(config.read_text())["corpus"]["path"]
    sets = ["--set", f"backbone.name={backbone}", "--set", f"corpus.path={corpus}"]
    assert cli_main(["gate", "tiny", *run, *sets]) == 0
    cfg = InferBenchConfig(prompt_tokens=8, new_tokens=3, batch_sizes=[1], repeats=2, warmup=1, ladder=False,
                           methods=["backbone", "memory", "memory-gate"], out_dir=str(root / "out-gate"), threads=1)
    results = main(str(config), cfg, progress=False)
    assert set(results["methods"]) == {"backbone", "memory", "memory-gate"}
    ratio = results["ratios"]["memory-gate"]["1"]["decode_vs_backbone"] / results["ratios"]["memory"]["1"][
        "decode_vs_backbone"]
    assert results["gate_decode_ratio"] == {"1": ratio} and ratio > 0
    assert "learned gate / fixed λ: batch 1" in (root / "out-gate" / "report.md").read_text()


def test_ladder_skips_the_fused_head_of_a_corpus_head_with_a_note():
    backbone = tiny_backbone("llama")
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(backbone, "tiny", tie_head=True, vocab="corpus", head_vocab_size=40)).eval()
    memory.set_head_vocab(torch.arange(0, 80, 2))
    tie_to_backbone(memory, backbone)
    variants = memory_variants(backbone, memory, 0.4)
    assert set(variants) == {"memory:naive", "memory:+kept", "memory:bf16"}
    assert ladder_notes(backbone, memory) == ["memory:+fused skipped: the memory has a corpus head (a copy of some "
                                              "of the output embedding's rows), so there is no shared head to fuse"]
    assert ladder_notes(backbone, tied_memory(backbone)) == []
    x = torch.tensor([[5, 17, 3, 99, 42, 7]])
    with torch.no_grad():
        expected = MemoryAugmentedForCausalLM.from_parts(backbone, memory, 0.4)(input_ids=x, logits_to_keep=1).logits
        got = variants["memory:+kept"](input_ids=x, logits_to_keep=1).logits
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)


def test_knnlm_uses_the_runs_own_keys_when_no_other_run_exists(finished_run):
    root, config = finished_run
    knn = KnnSetupConfig(sources=[str(root / "no-such-run" / "datastore")], min_keys=1)
    cfg = InferBenchConfig(prompt_tokens=8, new_tokens=3, batch_sizes=[1], repeats=1, warmup=0, ladder=False,
                           methods=["backbone", "knnlm-exact"], out_dir=str(root / "out-own"), knn=knn, threads=1)
    results = main(str(config), cfg, progress=False)
    assert results["info"]["knnlm-exact"]["sources"] == [str(root / "run" / "datastore"),
                                                         str(root / "run" / "eval" / "validation")]
    alone = dataclasses.replace(cfg, knn_keys="run", out_dir=str(root / "out-run"))
    results = main(str(config), alone, progress=False)
    assert results["info"]["knnlm-exact"]["sources"] == [str(root / "run" / "datastore")]


def test_knnlm_without_a_built_datastore_says_what_to_run(tmp_path, tiny_run):
    from studies.bench.infer.setup import knn_keys

    for keys in ("run", "bench"):
        cfg = InferBenchConfig(knn_keys=keys, knn=KnnSetupConfig(sources=[str(tmp_path / "none")]))
        with pytest.raises(ConfigError, match=r"is not built; run `mlpmem datastore quick.yaml` first$"):
            knn_keys(cfg, tmp_path / "run", (None, None), False, "fp32", "quick.yaml")


def test_weight_limits_of_a_corpus_head_count_its_rows_once():
    backbone = tiny_backbone("llama")
    memory = MLPMemory(memory_config_for(backbone, "tiny", key_layer=-1, tie_head=True, head_vocab_size=7)).eval()
    memory.set_head_vocab(torch.arange(7) * 3)
    tie_to_backbone(memory, backbone)
    lim = weight_limits(backbone, memory)
    assert lim["corpus_head_rows"] == 7
    assert lim["decode_ratio_limit_separate_heads"] == lim["decode_ratio_limit_fused"] < 1
    assert "7 corpus tokens with its own head rows" in limit_text(lim)
    assert "with two head reads" in limit_text(weight_limits(backbone, tied_memory(backbone)))


@pytest.mark.parametrize("native", [True, False])
def test_the_machine_record_says_whether_bf16_is_native_there(native, monkeypatch):
    monkeypatch.setattr("mlpmem.compute.cpu_has_native_bf16", lambda: native)
    record = machine(2)
    assert record["threads"] == 2 and record["device"] == "cpu" and record["native_bf16"] is native
    assert machine_label(record).endswith(", native bf16" if native else ", no native bf16")
