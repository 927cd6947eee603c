"""``python -m studies bench breakeven`` end to end on the tiny preset at three tiny sizes: every section measured,
the break-even consistent with the totals, the growth laws and the projection there, a rerun measures nothing
again. No test asserts on time."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from helpers.corpus import write_corpus
from helpers.encoders import BagOfWordsEncoder
from mlpmem.backbone import load_backbone
from mlpmem.errors import ConfigError
from mlpmem.utils.io import dir_bytes
from studies.bench.breakeven import MethodCost, RequestShape, flops
from studies.bench.breakeven.config import BreakEvenConfig
from studies.bench.breakeven.run import main

SIZES = [300, 900, 2700]
SEARCH_KEYS = 5000
VERDICTS = {"always", "after", "until", "never"}


class TinyEncoder(torch.nn.Module):
    """A stand-in sentence encoder that is a module (its parameters count as RAG's encoder)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 16)

    def encode(self, texts, **kwargs):
        with torch.no_grad():
            return torch.nn.functional.normalize(self.proj(BagOfWordsEncoder().encode(texts)), dim=1)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, tiny_backbone_dir):
    root = tmp_path_factory.mktemp("breakeven")
    corpus = write_corpus(root / "corpus", 10)
    sets = [f"backbone.name={tiny_backbone_dir}", f"corpus.path={corpus}", "train.epochs=1",
            "corpus.max_tokens.validation=300", "corpus.max_tokens.test=300"]
    cfg = BreakEvenConfig(sizes=SIZES, overrides=sets, out_dir=str(root / "out"), docs_dir=str(root / "docs"),
                          prompt_tokens=8, new_tokens=3, serving_batch=2, repeats=1, warmup=0, ivfpq_min_keys=800,
                          pq_bytes=8, search_keys=[SEARCH_KEYS], threads=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("studies.bench.infer.setup.load_encoder", TinyEncoder)
        mp.setattr("mlpmem.utils.shards.FSYNC", False)
        results = main("tiny", cfg, progress=False)
    return root, cfg, results


def test_every_size_is_measured(measured):
    root, cfg, results = measured
    entries = results["sizes"]
    assert [e["cap"] for e in entries] == SIZES
    assert all(e["tokens"] <= e["cap"] for e in entries) and entries[0]["tokens"] < entries[1]["tokens"] < entries[2][
        "tokens"]
    for e in entries:
        seconds = e["offline_seconds"]
        assert {"memory", "knnlm-exact", "rag", "cpt", "lora"} <= set(seconds)
        assert seconds["memory"] == pytest.approx(sum(seconds["memory_parts"].values()))
        assert set(e["online"]["knnlm-exact"]) == {"1"}  # exact search: batch 1 only
        assert all(set(e["online"][m]) == {"1", "2"} for m in ("backbone", "memory", "rag"))
        assert e["storage_bytes"]["knnlm-exact"] == dir_bytes(f"{e['run_dir']}/datastore") > 0
        assert e["storage_bytes"]["memory"] > 0 and e["storage_bytes"]["rag"] > 0
    small, large = entries[0], entries[2]
    assert "knnlm" not in small["online"] and "fewer than ivfpq_min_keys" in small["ivfpq_note"]
    assert set(large["online"]["knnlm"]) == {"1", "2"} and large["storage_bytes"]["knnlm"] > large["storage_bytes"][
        "knnlm-exact"]
    assert large["offline_seconds"]["knnlm"] > large["offline_seconds"]["knnlm-exact"]


def test_flop_estimates_follow_parameter_counts(measured):
    root, cfg, results = measured
    counts = flops.backbone_counts(load_backbone(cfg.overrides[0].split("=", 1)[1])[0])
    for e in results["sizes"]:
        fl = e["offline_flops_estimate"]
        assert fl["memory_parts"]["keys"] == pytest.approx(2 * counts.up_to(counts.layers - 1) * e["tokens"] * 32 / 16)
        assert fl["memory_parts"]["teacher"] == pytest.approx(2.0 * e["key_dim"] * e["tokens"] ** 2)  # exact teacher
        cpt = e["finetune"]["cpt"]
        assert fl["cpt"] == pytest.approx(6.0 * counts.parameters * cpt["tokens"]) and fl["lora"] > 0
        assert fl["rag"] == pytest.approx(2 * (64 * 16 + 16) * e["tokens"])


def test_break_even_agrees_with_the_totals(measured):
    root, cfg, results = measured
    shape = RequestShape(**results["request"])
    assert shape == RequestShape(8, 2)  # the first token is TTFT's, two more are decoded
    for e in results["sizes"]:
        assert set(e["breakeven"]) == {"1", "2"} and set(e["breakeven"]["1"]) >= {"rag", "knnlm-exact"}
        for batch, against in e["breakeven"].items():
            cost = {m: MethodCost(m, e["offline_seconds"][m], v[batch]["ttft_per_request_s"], v[batch]["decode_s"])
                    for m, v in e["online"].items() if batch in v}
            for other, verdict in against.items():
                assert verdict["verdict"] in VERDICTS
                if verdict["verdict"] == "after":
                    n = verdict["requests"]
                    assert cost["memory"].total(n, shape) < cost[other].total(n, shape)
                    assert cost["memory"].total(n - 1, shape) >= cost[other].total(n - 1, shape)


def test_growth_laws_and_projection(measured):
    root, cfg, results = measured
    growth = results["growth"]
    assert growth["key extraction"]["linear"]["points"] == 3 and "power" in growth["key extraction"]
    assert len(growth["kNN-LM search per token, IVF-PQ"]["points"]) == 2
    assert growth["datastore (keys + values)"]["power"]["exponent"] == pytest.approx(1.0, abs=0.05)
    proj = results["projection"]
    assert [s["tokens"] for s in proj["sizes"]] == [1e8, 1e9, 5e9] and proj["from_tokens"] == results["sizes"][-1][
        "tokens"]
    assert proj["sizes"][-1]["storage_bytes"]["knnlm"] / 1e12 == pytest.approx(40.98, abs=0.01)  # the released 40 TB
    for size in proj["sizes"]:
        assert {b["verdict"] for b in size["breakeven"].values()} <= VERDICTS
    assert proj["decode_6x_tokens"] is None or proj["decode_6x_tokens"] > 0


def test_search_beyond_the_corpus_tops_the_largest_run_up_with_synthetic_keys(measured):
    root, cfg, results = measured
    (searched,) = results["search_scale"]
    largest = results["sizes"][-1]
    assert searched["keys"] == SEARCH_KEYS and searched["run_tokens"] == largest["tokens"]
    assert largest["tokens"] <= searched["real_keys"] < SEARCH_KEYS  # the run's datastore and validation keys
    assert searched["memory_over_knnlm"] == pytest.approx(searched["decode_tok_s"]["memory"]
                                                          / searched["decode_tok_s"]["knnlm"])
    assert searched["index"]["nlist"] == 5000 // 39 and searched["index"]["bytes"] > 0  # 39 training keys a list
    assert results["projection"]["rates_flop_s"]["search_keys"] == SEARCH_KEYS
    text = (root / "docs" / "report.md").read_text()
    assert "## kNN-LM's search beyond the measured corpora (synthetic keys)" in text
    assert f"--search-keys {SEARCH_KEYS}" in text


def test_report_results_and_figure(measured):
    root, cfg, results = measured
    docs = root / "docs"
    saved = json.loads((docs / "results.json").read_text())
    assert [e["tokens"] for e in saved["sizes"]] == [e["tokens"] for e in results["sizes"]]
    text = (docs / "report.md").read_text()
    for heading in ("## Offline cost per corpus size", "## Online cost", "## Storage at inference",
                    "## Break-even", "## How each cost grows", "## Projection to the paper's regime (a projection, "
                    "not a measurement)"):
        assert heading in text
    assert (docs / "breakeven.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (root / "out" / "train-300" / "infer" / "report.md").is_file()  # bench infer's own report per size


def test_a_rerun_measures_nothing_again(measured):
    root, cfg, results = measured
    files = (sorted((root / "out").glob("train-*/costs.json")) + sorted((root / "out").glob("train-*/infer/*.json"))
             + sorted((root / "out").glob("search-*/*/*.json")))
    before = {f: f.stat().st_mtime_ns for f in files}
    again = main("tiny", dataclasses.replace(cfg, docs_dir=str(root / "docs-again")), progress=False)
    assert {f: f.stat().st_mtime_ns for f in files} == before
    assert [e["offline_seconds"] for e in again["sizes"]] == [e["offline_seconds"] for e in results["sizes"]]
    assert again["sizes"][0]["breakeven"] == results["sizes"][0]["breakeven"]


def test_a_changed_config_or_sizes_past_the_corpus_are_one_line_errors(measured):
    root, cfg, results = measured
    changed = dataclasses.replace(cfg, overrides=[*cfg.overrides, "train.lr=0.01"])
    with pytest.raises(ConfigError, match=r"costs.json was measured under another config: give another --out"):
        main("tiny", changed, progress=False)
    within = dataclasses.replace(cfg, search_keys=[100])
    with pytest.raises(ConfigError, match=r"^search_keys must exceed the [\d,]+ keys the largest size's run already "
                                          r"holds, got 100$"):
        main("tiny", within, progress=False)
    past = dataclasses.replace(cfg, sizes=[10**6, 10**7], out_dir=str(root / "out-past"))
    with pytest.raises(ConfigError, match=r"^sizes 1000000 and 10000000 both hold the whole training split"):
        main("tiny", past, progress=False)


@pytest.mark.parametrize("bad", [dict(sizes=[]), dict(sizes=[100, 100]), dict(new_tokens=1),
                                 dict(finetune=["qlora"]), dict(rag_retriever="tfidf"), dict(search_keys=[0]),
                                 dict(search_keys=[10, 10])])
def test_bad_options_are_one_line_errors(bad):
    with pytest.raises(ConfigError) as exc:
        BreakEvenConfig(**bad)
    assert "\n" not in str(exc.value)
