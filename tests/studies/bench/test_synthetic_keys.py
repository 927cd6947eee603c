"""The inference benchmark's kNN-LM datastore: the resampled synthetic top-up (real keys moved by seeded noise,
their next tokens kept) in the keystore format, resumable, replaced when its settings change."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlpmem.baselines.knnlm import CombinedKeyStore
from mlpmem.datastore import KeyStore
from mlpmem.errors import ConfigError
from studies.bench import synthetic_keys
from studies.bench.knn_setup import KnnSetupConfig
from studies.bench.synthetic_keys import resampled_keys, synthetic_keystore


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setattr("mlpmem.utils.shards.FSYNC", False)
    monkeypatch.setattr(synthetic_keys, "RESAMPLE_SHARD_ROWS", 300)
    return CombinedKeyStore([synthetic_keystore(tmp_path / "source", rows=1000, dim=16, vocab=512, shard_rows=400)])


def test_resampled_keys_stay_near_the_real_ones_with_their_next_tokens(source, tmp_path):
    out = resampled_keys(source, tmp_path / "extra", rows=1000)
    store = KeyStore(out, verify=True)
    assert store.num_rows == 1000 and len(store.manifest["shards"]) == 4 and store.hidden_size == 16
    combined = CombinedKeyStore([source.stores[0].path, out])  # the source's fingerprint: the two combine
    assert combined.num_rows == 2000
    real, keys = source.array("keys").astype(np.float32), store.array("keys").astype(np.float32)
    nearest = ((keys[:, None, :] - real[None, :, :]) ** 2).sum(-1).argmin(1)  # (1000,)
    std = real.std(0)
    assert np.abs(keys - real[nearest]).mean() == pytest.approx(0.1 * np.sqrt(2 / np.pi) * std.mean(), rel=0.15)
    assert (store.array("values") == source.array("values")[nearest]).mean() > 0.95


def test_an_interrupted_build_resumes_to_the_same_keys_and_other_settings_replace_it(source, tmp_path):
    out = resampled_keys(source, tmp_path / "extra", rows=700)
    whole = KeyStore(out).array("keys").copy()
    manifest = json.loads((out / "manifest.json").read_text())
    cut = {**manifest, "shards": manifest["shards"][:1], "rows": manifest["shards"][0]["rows"], "complete": False}
    (out / "manifest.json").write_text(json.dumps(cut))
    np.testing.assert_array_equal(KeyStore(resampled_keys(source, out, rows=700)).array("keys"), whole)
    assert KeyStore(resampled_keys(source, out, rows=400)).num_rows == 400


def test_top_up_is_checked():
    with pytest.raises(ConfigError, match="knn top_up must be one of"):
        KnnSetupConfig(top_up="random")
