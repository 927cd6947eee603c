"""A distilled teacher folder built from saved memories: members checked, settings recorded, resumed by shard."""

import numpy as np
import pytest
import torch

import studies.distil_teacher as dt
from helpers.corpus import corpus_text
from helpers.faults import killed_after_first_shard
from helpers.tiny import seeded_memory
from mlpmem.corpora.documents import Document, tokenize_documents
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import ConfigError, CorruptArtifact
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.teacher import TeacherConfig, TeacherStore, build_teacher
from studies.distil_teacher import DistilConfig, build_distilled_teacher, check_members


def test_members_must_share_a_head_and_the_weight_is_a_share():
    a, b = seeded_memory(0), seeded_memory(1, head_vocab_size=6)
    b.set_head_vocab(torch.arange(6))
    with pytest.raises(ConfigError, match="different vocabularies"):
        check_members([a, b])
    with pytest.raises(ConfigError, match="knn_weight"):
        DistilConfig(knn_weight=1.5)
    with pytest.raises(ConfigError, match="needs the run's kNN teacher"):
        build_distilled_teacher("nowhere", ["a"], "out", DistilConfig(knn_weight=0.5))


@pytest.fixture()
def store_dir(tiny_llama, tiny_tokenizer, tmp_path):
    docs = tokenize_documents([Document(str(i), t) for i, t in enumerate(corpus_text(4))], tiny_tokenizer)
    config = KeystoreConfig(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=2)
    build_keystore(config, tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    return tmp_path / "ds"


def _saved_memories(store: KeyStore, folder, n: int) -> tuple[list, list[MLPMemory]]:
    folders, memories = [], []
    for seed in range(n):
        torch.manual_seed(seed)
        memory = MLPMemory(MemoryConfig(input_size=store.hidden_size, vocab_size=int(store.fingerprint["vocab_size"]),
                                        tie_head=False,
                                        intermediate_size=16, num_layers=1)).eval()
        folders.append(memory.save_pretrained(folder / f"m{seed}"))
        memories.append(memory)
    return folders, memories


def test_build_resumes_by_shard_and_checks_its_settings(store_dir, tmp_path, monkeypatch):
    store = KeyStore(store_dir)
    assert len(store.shards) > 1
    build_teacher(store_dir, tmp_path / "knn", TeacherConfig(k=4, temperature=1.0, top_k=4), progress=False)
    folders, _ = _saved_memories(store, tmp_path, 2)
    cfg = DistilConfig(knn_weight=0.5, top_k=4, batch=7)
    build_distilled_teacher(store_dir, folders, tmp_path / "full", cfg, tmp_path / "knn", progress=False)
    full = TeacherStore(tmp_path / "full", datastore=store)
    assert full.num_rows == store.num_rows and full.array("ids").shape == (store.num_rows, 4)
    np.testing.assert_allclose(full.array("probs").astype(np.float64).sum(1) + full.array("residual"), 1.0, atol=2e-3)

    with killed_after_first_shard(monkeypatch, dt):
        build_distilled_teacher(store_dir, folders, tmp_path / "part", cfg, tmp_path / "knn", progress=False)
    build_distilled_teacher(store_dir, folders, tmp_path / "part", cfg, tmp_path / "knn", progress=False)
    for f in sorted((tmp_path / "full").glob("*.npy")):
        assert f.read_bytes() == (tmp_path / "part" / f.name).read_bytes()
    with pytest.raises(CorruptArtifact):  # the same folder asked for other targets
        build_distilled_teacher(store_dir, folders[:1], tmp_path / "full", cfg, tmp_path / "knn",
                                progress=False)
