"""The bad-input matrix: every row ends in a one-line error naming the cause, or in a clean resume, and
nothing written before is lost."""

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mlpmem.utils.shards
from helpers.corpus import corpus_text
from helpers.paths import ROOT
from helpers.tiny import tiny_backbone
from mlpmem.corpora.documents import (
    Document,
    make_windows,
    read_documents,
    tokenize_documents,
)
from mlpmem.datastore import KeyStore, KeystoreConfig, build_keystore
from mlpmem.errors import (
    ConfigError,
    CorpusError,
    CorruptArtifact,
    FingerprintMismatch,
    MlpmemError,
)
from mlpmem.index import ExactIndex, FaissIndex, IndexConfig, open_or_build
from mlpmem.inference.mixing import check_lambda
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.run import Run
from mlpmem.teacher import TeacherConfig, TeacherStore, build_teacher
from mlpmem.training.loss import check_alpha
from mlpmem.utils.shards import DiskFull, sha256_file

KW = dict(layer=-1, site="ffn_input", block_size=24, stride=12, batch_size=2, batches_per_shard=2)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_THREADS", "1")  # tiny models: one thread (no OpenMP spinning on a busy machine)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def one_line(excinfo, *words) -> str:
    """The error is a single line that names its cause."""
    message = str(excinfo.value)
    assert "\n" not in message and isinstance(excinfo.value, MlpmemError)
    for word in words:
        assert word in message, (word, message)
    return message


@pytest.fixture()
def docs(tiny_tokenizer):
    return tokenize_documents([Document(str(i), t) for i, t in enumerate(corpus_text(4))], tiny_tokenizer)


@pytest.fixture()
def store_dir(docs, tiny_llama, tiny_tokenizer, tmp_path):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    return tmp_path / "ds"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.npy"))}


# --- corpora --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content,cause", [(b"", "empty"), (b"\n \n", "empty"), (b"\x00\x01ELF\x02", "binary"),
                                           (b"caf\xe9 \xff\xfe", "not UTF-8")])
def test_empty_binary_or_non_utf8_corpus(tmp_path, content, cause):
    (tmp_path / "c.txt").write_bytes(content)
    with pytest.raises(CorpusError) as exc:
        read_documents(tmp_path / "c.txt")
    one_line(exc, cause, "c.txt")


def test_document_longer_than_a_block_is_windowed_not_loaded_whole(docs, tiny_llama, tiny_tokenizer, tmp_path):
    """One document 40 blocks long: every target scored once, with inputs never longer than block_size."""
    long_doc = [np.concatenate([docs[0]] + [d[1:] for d in docs] * 3)]
    assert len(long_doc[0]) > 40 * KW["block_size"]
    windows = make_windows([len(long_doc[0])], KW["block_size"], KW["stride"])
    assert max(w.end - w.start for w in windows) == KW["block_size"]
    manifest = build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, long_doc, tmp_path / "ds",
                              progress=False)
    assert manifest["rows"] == len(long_doc[0]) - 1


def test_block_longer_than_the_backbone_context(docs, tiny_llama, tiny_tokenizer, tmp_path):
    with pytest.raises(ConfigError) as exc:
        build_keystore(KeystoreConfig(**dict(KW, block_size=4096, stride=2048)), tiny_llama, tiny_tokenizer, docs,
                       tmp_path / "ds", progress=False)
    one_line(exc, "block_size=4096", "512")


# --- a backbone or tokenizer other than the datastore's ------------------------------------------------


def test_other_tokenizer_or_backbone(store_dir, docs, tiny_llama, tiny_tokenizer):
    store = KeyStore(store_dir)
    other_tok = type(tiny_tokenizer).from_pretrained  # a tokenizer with one more token
    tok2 = tiny_tokenizer.__class__(tokenizer_object=tiny_tokenizer.backend_tokenizer.__class__.from_str(
        tiny_tokenizer.backend_tokenizer.to_str()))
    tok2.add_tokens(["<extra>"])
    assert other_tok and tok2.get_vocab() != tiny_tokenizer.get_vocab()
    with pytest.raises(FingerprintMismatch) as exc:
        store.check_backbone(tiny_llama, tok2)
    one_line(exc, "tokenizer_sha")
    with pytest.raises(FingerprintMismatch) as exc:
        other = tiny_backbone("llama", seed=3, vocab_size=len(tiny_tokenizer), preset="bpe")
        store.check_backbone(other, tiny_tokenizer)
    one_line(exc, "weights_sha")
    before = snapshot(store_dir)
    with pytest.raises(CorruptArtifact) as exc:  # resuming a build with another backbone refuses to mix
        other = tiny_backbone("llama", seed=3, vocab_size=len(tiny_tokenizer), preset="bpe")
        build_keystore(KeystoreConfig(**KW), other, tiny_tokenizer, docs, store_dir, progress=False)
    one_line(exc, "backbone", "--rebuild")
    assert snapshot(store_dir) == before


# --- damaged shards, indexes, checkpoints ----------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "reorder", "delete"])
def test_damaged_datastore_shards(store_dir, damage):
    a, b = store_dir / "keys-00000.npy", store_dir / "keys-00001.npy"
    data = bytearray(a.read_bytes())
    if damage == "truncate":
        a.write_bytes(data[:-100])
    elif damage == "bitflip":
        data[len(data) // 2] ^= 0x01
        a.write_bytes(bytes(data))
    elif damage == "reorder":  # two shards swapped on disk
        tmp = store_dir / "swap"
        a.rename(tmp), b.rename(a), tmp.rename(b)
    else:
        a.unlink()
    with pytest.raises(CorruptArtifact) as exc:
        KeyStore(store_dir)
    one_line(exc, "keys-00000.npy")


def test_damaged_shard_is_rebuilt_on_resume(store_dir, docs, tiny_llama, tiny_tokenizer):
    """A resumed build never trusts a shard that fails its checksum; the run says so, no silent reuse."""
    good = snapshot(store_dir)
    manifest = json.loads((store_dir / "manifest.json").read_text())
    manifest["complete"] = False
    (store_dir / "manifest.json").write_text(json.dumps(manifest))
    (store_dir / "values-00002.npy").write_bytes(b"garbage")
    with pytest.raises(CorruptArtifact) as exc:
        build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, store_dir, progress=False)
    one_line(exc, "values-00002.npy", "checksum")
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, store_dir, rebuild=True, progress=False)
    assert snapshot(store_dir) == good


def test_broken_progress_record_is_dropped_and_its_shard_rebuilt(store_dir, docs, tiny_llama, tiny_tokenizer):
    good = snapshot(store_dir)
    manifest = json.loads((store_dir / "manifest.json").read_text())
    last = manifest["shards"].pop()
    manifest.update(complete=False, rows=manifest["rows"] - last["rows"])
    (store_dir / "manifest.json").write_text(json.dumps(manifest))
    (store_dir / f"part-{last['index']:05d}.json").write_text('{"index": 3, "files"')  # killed mid-write
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, store_dir, progress=False)
    assert snapshot(store_dir) == good and KeyStore(store_dir).manifest["complete"]


def test_damaged_teacher_and_index(store_dir, tmp_path):
    cfg = TeacherConfig(k=4, top_k=2, index=IndexConfig(kind="ivf_flat", nlist=2, nprobe=2, train_size=100))
    build_teacher(store_dir, tmp_path / "t", cfg, progress=False)
    probs = tmp_path / "t" / "probs-00001.npy"
    probs.write_bytes(probs.read_bytes()[:-3] + b"\x00\x00\x00")
    with pytest.raises(CorruptArtifact) as exc:
        TeacherStore(tmp_path / "t")
    one_line(exc, "probs-00001.npy")
    index_file = tmp_path / "t" / "index" / "index.faiss"
    data = bytearray(index_file.read_bytes())
    data[-5] ^= 0x40
    index_file.write_bytes(bytes(data))
    store = KeyStore(store_dir)
    meta = json.loads((tmp_path / "t" / "index" / "index.json").read_text())
    with pytest.raises(CorruptArtifact) as exc:
        FaissIndex.open(tmp_path / "t" / "index", store, {"kind": meta["kind"]})
    one_line(exc, "index.faiss", "checksum")
    rebuilt = open_or_build(store, cfg.index, tmp_path / "t" / "index")  # reopening rebuilds a damaged index
    assert rebuilt.ntotal == store.num_rows and sha256_file(index_file) == json.loads(
        (tmp_path / "t" / "index" / "index.json").read_text())["sha256"]


def test_damaged_or_pickled_checkpoint(tmp_path):
    from mlpmem.memory import MemoryConfig, MLPMemory
    from mlpmem.training.config import TrainConfig
    from mlpmem.training.data import EvalData, TrainData
    from mlpmem.training.loop import train_memory

    rng = np.random.default_rng(0)
    n, d, v = 64, 8, 12
    data = TrainData(rng.normal(size=(n, d)).astype(np.float16), rng.integers(0, v, n).astype(np.int32),
                     rng.integers(0, v, (n, 2)).astype(np.int32), np.full((n, 2), 0.5, np.float16),
                     np.zeros(n, np.float32))
    val = EvalData(data.keys[:16], data.targets[:16], np.full(16, -np.log(v), np.float32))
    cfg = TrainConfig(epochs=2, batch_size=16, checkpoint_every=2, eval_lambdas=[0.0, 1.0], lr=4e-4, precision="fp32")

    def memory():
        torch.manual_seed(0)
        return MLPMemory(MemoryConfig(input_size=d, vocab_size=v, intermediate_size=8, num_layers=1,
                                      tie_head=False))

    train_memory(memory(), data, val, cfg, tmp_path, progress=False, stop_after=3)
    weights = tmp_path / "checkpoint" / "memory" / "model.safetensors"
    data_bytes = bytearray(weights.read_bytes())
    data_bytes[-2] ^= 0x08  # a bit flip inside a tensor: safetensors alone would load it silently
    weights.write_bytes(bytes(data_bytes))
    with pytest.raises(CorruptArtifact) as exc:
        train_memory(memory(), data, val, cfg, tmp_path, progress=False)
    one_line(exc, "model.safetensors", "checksum")
    import pickle

    weights.write_bytes(pickle.dumps({"w": [1, 2, 3]}))  # never unpickled: rejected as unreadable
    state = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())
    state["files"]["memory/model.safetensors"] = sha256_file(weights)  # its checksum passes: the loader refuses it
    (tmp_path / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(CorruptArtifact) as exc:
        train_memory(memory(), data, val, cfg, tmp_path, progress=False)
    one_line(exc, "unreadable")


# --- NaN / Inf keys, k larger than the store, λ α T out of range --------------------------------------------


def test_nan_or_inf_keys(store_dir, tmp_path):
    keys = store_dir / "keys-00001.npy"
    array = np.load(keys)
    array[3, 5] = np.inf
    np.save(keys, array)
    manifest = json.loads((store_dir / "manifest.json").read_text())
    manifest["shards"][1]["files"]["keys"]["sha256"] = sha256_file(keys)  # checksums pass: the values are bad
    (store_dir / "manifest.json").write_text(json.dumps(manifest))
    for kind in ("exact", "ivf_flat"):
        cfg = TeacherConfig(k=4, top_k=2, index=IndexConfig(kind=kind, nlist=2, nprobe=2, train_size=100))
        with pytest.raises(CorruptArtifact) as exc:
            build_teacher(store_dir, tmp_path / kind, cfg, progress=False)
        one_line(exc, "NaN/Inf")
    with pytest.raises(CorruptArtifact) as exc:
        ExactIndex(np.array([[0.0, np.nan]], np.float16))
    one_line(exc, "NaN/Inf")


def test_k_larger_than_the_store(store_dir, tmp_path):
    n = KeyStore(store_dir).num_rows
    with pytest.raises(ConfigError) as exc:
        build_teacher(store_dir, tmp_path / "t", TeacherConfig(k=n + 5), progress=False)
    one_line(exc, f"k={n + 5}", str(n))


@pytest.mark.parametrize("check,value,name", [
    (check_lambda, -0.1, "lambda"), (check_lambda, 1.5, "lambda"), (check_lambda, float("nan"), "lambda"),
    (check_alpha, 1.01, "alpha"), (check_alpha, float("nan"), "alpha"),
    (lambda t: TeacherConfig(temperature=t), 0.0, "temperature"),
    (lambda t: TeacherConfig(temperature=t), -2.0, "temperature"),
    (lambda t: TeacherConfig(temperature=t), float("inf"), "temperature"),
    (lambda t: TeacherConfig(temperature=t), float("nan"), "temperature")])
def test_lambda_alpha_temperature_out_of_range(check, value, name):
    with pytest.raises(ConfigError) as exc:
        check(value)
    one_line(exc, name)


# --- a disk that fills up mid-stage ------------------------------------------------------------------------


def test_disk_full_mid_datastore_then_resume(docs, tiny_llama, tiny_tokenizer, tmp_path, monkeypatch):
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "full", progress=False)
    real, calls = np.save, [0]

    def filling_save(file, array, **kwargs):
        calls[0] += 1
        if calls[0] == 5:  # the third shard's keys: the disk is full
            file.write(b"\x93NUMPY partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(file, array, **kwargs)

    monkeypatch.setattr(np, "save", filling_save)
    with pytest.raises(DiskFull) as exc:
        build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds", progress=False)
    one_line(exc, "disk full", "keys-00002.npy")
    assert not list((tmp_path / "ds").glob("*.tmp"))  # the partial file is gone
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert [s["index"] for s in manifest["shards"]] == [0, 1]  # what was written before is intact
    monkeypatch.setattr(np, "save", real)
    build_keystore(KeystoreConfig(**KW), tiny_llama, tiny_tokenizer, docs, tmp_path / "ds",
                   progress=False)  # space freed: the rerun resumes
    assert snapshot(tmp_path / "ds") == snapshot(tmp_path / "full")


def test_disk_full_under_a_real_file_size_limit(tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse the write (EFBIG), as a full filesystem would (ENOSPC)."""
    script = f"""
import resource, signal, sys
import numpy as np
sys.path.insert(0, {str(ROOT / 'src')!r})
from pathlib import Path
from mlpmem.utils.shards import DiskFull, save_array
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
out = Path({str(tmp_path)!r})
save_array(out, "small.npy", np.zeros(1000, np.float32))
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    save_array(out, "big.npy", np.zeros(100_000, np.float32))
except DiskFull as exc:
    print("ERR", exc)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ERR disk full while writing") and "big.npy" in proc.stdout
    assert proc.stdout.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.npy"]  # no partial file, the old one kept
    assert np.load(tmp_path / "small.npy").shape == (1000,)


# --- configuration files and paths ------------------------------------------------------------------------


def test_unsafe_yaml_is_refused(tmp_path):
    bad = tmp_path / "evil.yaml"
    bad.write_text("run_dir: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError) as exc:
        PipelineConfig.from_yaml(bad)
    one_line(exc, "not valid YAML")


def test_paths_cannot_escape_the_run_folder(tmp_path):
    cfg = PipelineConfig.from_yaml("tiny", [f"run_dir={tmp_path / 'run'}"])
    run = Run(cfg, progress=False)
    assert run.path("teacher", "index") == tmp_path / "run" / "teacher" / "index"
    for parts in (("..", "elsewhere"), ("datastore", "..", "..", "x"), ("/etc",)):
        with pytest.raises(ConfigError) as exc:
            run.path(*parts)
        one_line(exc, "escapes the run folder")
    from mlpmem.pipeline.train import stage_train

    with pytest.raises(ConfigError) as exc:
        stage_train(run, out=tmp_path / "outside")
    one_line(exc, "escapes the run folder")
    shutil.rmtree(tmp_path / "run")


def test_old_or_foreign_manifest(store_dir):
    manifest = json.loads((store_dir / "manifest.json").read_text())
    (store_dir / "manifest.json").write_text(json.dumps(dict(manifest, format="mlpmem.keystore/0")))
    with pytest.raises(CorruptArtifact) as exc:
        KeyStore(store_dir)
    one_line(exc, "not a keystore manifest")
    (store_dir / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptArtifact) as exc:
        KeyStore(store_dir)
    one_line(exc, "not valid JSON")
