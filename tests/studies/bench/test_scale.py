"""bench scale pieces that run in seconds: the synthetic keystore is a valid store, the report lists every part."""

import numpy as np

from helpers.corpus import write_corpus
from mlpmem.datastore import KeyStore
from studies.bench.scale.corpus import repeated_corpus
from studies.bench.scale.report import markdown
from studies.bench.scale.workers import worker_corpus
from studies.bench.synthetic_keys import synthetic_keystore


def test_synthetic_keystore_opens_as_a_verified_keystore(tmp_path):
    path = synthetic_keystore(tmp_path / "ds", rows=1000, dim=8, vocab=512, shard_rows=300)
    store = KeyStore(path)
    assert store.num_rows == 1000 and len(store.shards) == 4 and store.hidden_size == 8
    keys, values = store.array("keys"), store.array("values")
    assert keys.shape == (1000, 8) and keys.dtype == np.float16 and values.max() < 512
    assert np.array_equal(store.rows("keys")[[0, 999]], keys[[0, 999]])


def test_markdown_reports_every_measured_part():
    results = {"processes": [{"stage": "datastore", "processes": 2, "rows": 100, "launch_wall_s": 3.0,
                              "stage_s": 1.0, "tokens_per_s": 100.0}],
               "memory": [{"rows": 1000, "datastore_mb": 1.2, "stage": "train", "seconds": 2.0, "peak_rss_mb": 400.0}],
               "resume": {"rows": 1000, "shards": 4, "shards_done_at_kill": 2, "scratch_s": 10.0, "resume_s": 4.0,
                          "resume_over_scratch": 0.4}}
    text = markdown(results, "python -m studies bench scale x")
    assert "`python -m studies bench scale x`" in text
    assert "| datastore | 2 | 100 | 3.0 | 1.0 | 100 |" in text
    assert "| 1000 | 1 | train | 2.0 | 400 |" in text and "| 1000 | 4 | 2 | 10.0 | 4.0 | 0.40 |" in text
    assert "Resume" not in markdown({k: v for k, v in results.items() if k != "resume"}, "c")


def test_corpus_size_workers_see_the_repeated_split(tmp_path, tiny_backbone_dir):
    corpus = write_corpus(tmp_path / "raw", 10)
    sets = [f"corpus.path={corpus}", f"backbone.name={tiny_backbone_dir}"]
    once, thrice = (worker_corpus(str(repeated_corpus("tiny", tmp_path / f"x{r}", r, sets)), "stream")
                    for r in (1, 3))
    assert thrice["tokens"] == 3 * once["tokens"] > 0 and thrice["peak_rss_mb"] > 0
    assert worker_corpus(str(tmp_path / "x3" / "run"), "in-ram")["tokens"] == thrice["tokens"]
    results = {"corpus": [{"repeats": 3, "corpus_mb": 0.1, "mode": "stream", **thrice}]}
    assert f"| 3 | 0 | {thrice['tokens']} | stream |" in markdown(results, "c")


def test_markdown_derives_the_figures_the_docs_quote():
    memory = [{"rows": n, "datastore_mb": 1.0, "stage": stage, "seconds": 1.0, "peak_rss_mb": rss}
              for n, stage, rss in ((1000, "train", 400.0), (4000, "train", 406.0),
                                    (1000, "train-in-ram", 500.0), (4000, "train-in-ram", 900.0))]
    sharding = [{"sharding": s, "mmap_frees": frees, "rank": rank, "parameters": 2**20, "steps": 10,
                 "seconds": secs, "rss_before_mb": 1.0, "peak_rss_mb": rss}
                for s, frees, secs, rss in (("ddp", False, 9.0, 999.0), ("ddp", True, 10.0, 100.0),
                                            ("fsdp", True, 20.0, 94.0)) for rank in (0, 1)]
    corpus = [{"repeats": r, "corpus_mb": 1.0, "tokens": 2**20 * r, "mode": "in-ram", "seconds": 1.0,
               "peak_rss_mb": 10.0 * r} for r in (1, 3)]
    text = markdown({"memory": memory, "sharding": sharding, "corpus": corpus}, "c")
    assert "From 1,000 to 4,000 keys (4×) peak RSS grows by 6 MB (train), 400 MB (train-in-ram)." in text
    # 2**20 fp32 parameters = 4 MiB; grads + two moments halved over 2 processes = 6 MiB; DDP without frees ignored
    assert "peak RSS 6 MB lower" in text and "predicts 6 MB" in text and "2.00× the seconds per step" in text
    assert "10.0 bytes (in-ram)" in text
