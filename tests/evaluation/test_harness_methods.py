"""The lm-eval adapter on the other compared methods: RAG, CPT, LoRA, Memory Mosaics, on a finished tiny run.

RAG's loglikelihood is the backbone's on (the retrieved passages + the context) + the continuation, its
generate_until the backbone's greedy text on that prompt, retrieval one batch per call; CPT and LoRA loaded from
a saved folder score as the fine-tuned model in memory; a Memory Mosaics folder (``method=backbone``,
``pretrained=``) scores its own log-probs; folders for another backbone or without a tokenizer are one-line
errors.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch.nn.functional as F

import mlpmem.baselines.rag
from helpers.corpus import corpus_text
from helpers.encoders import BagOfWordsEncoder
from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import DOCS, direct_loglikelihood, generation_task, greedy_text, scores
from memory_mosaics.config import MosaicsConfig
from memory_mosaics.model import MosaicsForCausalLM
from mlpmem.baselines.cpt import FinetuneConfig
from mlpmem.baselines.finetuned import RECORD, save_finetuned
from mlpmem.baselines.lora import LoRAConfig, add_lora
from mlpmem.baselines.methods import MethodOptions, build_method
from mlpmem.baselines.rag import make_passages
from mlpmem.corpora.documents import read_documents
from mlpmem.errors import ConfigError, FingerprintMismatch
from mlpmem.evaluation.harness import MlpmemLM, evaluate
from mlpmem.pipeline.hf_export import open_run

# fixtures ``run_dir`` (a finished tiny run) and ``tasks`` (the 3-item local tasks): tests/evaluation/conftest.py

PASSAGES = [
    "The keeper of the old lighthouse walked to the shore at dawn.",
    "Gulls and boats were counted in a green book every day.",
    "A storm in November kept the boats at home for a week.",
    "Bread and cheese were sold at the market on Sundays.",
]
TOP_K = 2


@pytest.fixture()
def docs_file(tmp_path):
    path = tmp_path / "rag_docs.jsonl"
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in PASSAGES))
    return path


@pytest.fixture()
def stand_in_encoder(monkeypatch):
    """The dense retriever's encoder replaced by a bag of words (no sentence-transformers model loaded)."""
    monkeypatch.setattr(mlpmem.baselines.rag, "load_encoder", BagOfWordsEncoder)


def backbone_logp(model):
    return lambda ids: F.log_softmax(model(input_ids=ids).logits, -1)


def rag_lm(run_dir, kind: str, docs_file, **kwargs) -> tuple[MlpmemLM, list]:
    """The RAG adapter, and a record of every batch of queries its retriever was given."""
    lm = MlpmemLM(run=str(run_dir), method=f"rag-{kind}", docs=str(docs_file), top_k=TOP_K, **kwargs)
    batches, retrieve = [], lm._rag.retriever.retrieve

    def recording(queries, k):
        batches.append(list(queries))
        return retrieve(queries, k)

    lm._rag.retriever.retrieve = recording
    return lm, batches


def rag_prompt(lm, context: str) -> str:
    """The prompt written out by hand: the top-k passages (all fit), then the context unchanged."""
    passages = [h.text for h in lm._rag.retriever.retrieve([context], TOP_K)[0]]
    return "Context:\n" + "\n\n".join(passages) + "\n\n" + context


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_rag_loglikelihood_is_the_backbones_on_the_passages_prompt(run_dir, tasks, docs_file, stand_in_encoder,
                                                                   kind):
    lm, batches = rag_lm(run_dir, kind, docs_file, batch_size=2)
    got = scores(lm, tasks)["tiny_ll"]
    assert len(batches) == 1 and sorted(batches[0]) == sorted(d["context"] for d in DOCS)  # one batch
    backbone, tokenizer = lm.model, lm.tokenizer
    for doc, (loglik, _) in zip(DOCS, got):
        prompt = rag_prompt(lm, doc["context"])
        expected = direct_loglikelihood(backbone_logp(backbone), tokenizer, prompt, doc["target"])
        closed_book = direct_loglikelihood(backbone_logp(backbone), tokenizer, doc["context"], doc["target"])
        assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)
        assert not math.isclose(loglik, closed_book, rel_tol=1e-5, abs_tol=1e-4)  # the passages count


def test_rag_generate_until_is_greedy_generation_on_the_passages_prompt(run_dir, tasks, docs_file, tmp_path):
    lm, batches = rag_lm(run_dir, "bm25", docs_file, batch_size=1)
    prompts = [rag_prompt(lm, d["context"]) for d in DOCS]
    texts = [greedy_text(lm.model, lm.tokenizer, p) for p in prompts]
    stop = texts[0][3:5]  # a stop string the first greedy continuation reaches
    assert stop and len(texts[0]) > 5
    generation_task(tmp_path, stop, tasks / "docs.jsonl")
    batches.clear()
    seen, generate = [], lm._model_generate  # the token ids generation starts from (the tiny model's greedy
    lm._model_generate = lambda context, **kw: seen.append(context[0].tolist()) or generate(context, **kw)
    got = scores(lm, tmp_path, ("tiny_gen",))["tiny_gen"]  # text hardly depends on them, so they are checked)
    assert got == [t[: t.index(stop)] if stop in t else t for t in texts]
    assert sorted(seen) == sorted(lm.tok_encode(p) for p in prompts)
    assert len(batches) == 1 and len(batches[0]) == 3


def test_rag_from_model_args_strings_the_runs_documents_and_no_rolling(run_dir, tasks, docs_file):
    lm, _ = rag_lm(run_dir, "bm25", docs_file)
    out = evaluate(["tiny_ll"], model_args=f"run={run_dir},method=rag-bm25,docs={docs_file},top_k={TOP_K}",
                   include_path=tasks, local_only=True, log_samples=True)  # what `mlpmem lm-eval` passes
    assert out["config"]["mlpmem"]["rag"]["top_k"] == TOP_K
    assert [s["resps"][0][0] for s in sorted(out["samples"]["tiny_ll"], key=lambda s: s["doc_id"])] == \
        scores(lm, tasks)["tiny_ll"]
    with pytest.raises(ConfigError, match="loglikelihood_rolling is not defined for RAG") as exc:
        scores(lm, tasks, ("tiny_roll",))
    assert "\n" not in str(exc.value)
    lm = MlpmemLM(run=str(run_dir), method="rag-bm25", passage_words=7)  # no docs=: the run's train split
    train = read_documents(run_dir / "corpus" / "train.jsonl")
    assert lm._rag.retriever.passages == make_passages([d.text for d in train], 7)
    bad = docs_file.with_suffix(".json")
    bad.write_text('{"text": "not a list"}')
    with pytest.raises(ConfigError, match="non-empty JSON list"):
        MlpmemLM(run=str(run_dir), method="rag-bm25", docs=str(bad))


def finetuned(run_dir, method: str):
    """CPT or LoRA trained in memory on the run's backbone, as the QA suite builds it (quickly)."""
    finetune = FinetuneConfig(epochs=2, lr=1e-2, batch_size=2, block_size=16)
    options = MethodOptions(docs=[{"text": t} for t in corpus_text(4)], cpt=finetune,
                            lora=LoRAConfig(finetune=finetune), lora_params=2000, progress=False)
    return build_method(method, run_dir, open_run(run_dir).backbone, options)


@pytest.mark.parametrize("method", ["cpt", "lora"])
def test_cpt_and_lora_from_a_saved_folder_score_as_the_model_in_memory(run_dir, tasks, tmp_path, method):
    built = finetuned(run_dir, method)
    backbone, tokenizer = open_run(run_dir).backbone
    folder = save_finetuned(built, tmp_path / method, tokenizer)
    assert (folder / "adapter_config.json").is_file() == (method == "lora")
    assert (folder / "model.safetensors").is_file() == (method == "cpt")  # LoRA: the adapter only
    lm = MlpmemLM(run=str(run_dir), method=method, weights=str(folder), batch_size=2)
    got = scores(lm, tasks)["tiny_ll"]
    for doc, (loglik, _) in zip(DOCS, got):
        expected = direct_loglikelihood(backbone_logp(built.model), tokenizer, doc["context"], doc["target"])
        before = direct_loglikelihood(backbone_logp(backbone), tokenizer, doc["context"], doc["target"])
        assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)
        assert abs(loglik - before) > 1e-3  # the fine-tuned weights, not the backbone's


@pytest.mark.parametrize("method", ["cpt", "lora"])
@pytest.mark.parametrize("record", [True, False])
def test_weights_for_another_backbone_are_one_line_errors(run_dir, tmp_path, tiny_gpt2, tiny_tokenizer, method,
                                                          record):
    model = copy.deepcopy(tiny_gpt2) if method == "cpt" else add_lora(copy.deepcopy(tiny_gpt2), 2)
    folder = save_finetuned(model, tmp_path / "gpt2", tiny_tokenizer)
    if not record:
        (folder / RECORD).unlink()
    message = "differs in model_type" if record else ("for another backbone" if method == "cpt" else "do not load")
    with pytest.raises(FingerprintMismatch, match=message) as exc:
        MlpmemLM(run=str(run_dir), method=method, weights=str(folder))
    assert "\n" not in str(exc.value)
    other = "lora" if method == "cpt" else "cpt"
    with pytest.raises(ConfigError, match="LoRA adapter") as exc:
        MlpmemLM(run=str(run_dir), method=other, weights=str(folder))
    with pytest.raises(ConfigError, match="no such folder"):
        MlpmemLM(run=str(run_dir), method=method, weights=str(tmp_path / "nothing"))


@pytest.fixture()
def mosaics_dir(tmp_path, tiny_tokenizer):
    """A tiny Memory Mosaics model saved as ``memory-mosaics train`` leaves it (weights + tokenizer)."""
    config = MosaicsConfig(vocab_size=len(tiny_tokenizer), hidden_size=16, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=32, short_window=4, long_gap_min=2,
                           long_gap_max=4, long_gap_eval=2, scan_chunk=4)
    MosaicsForCausalLM(config).save_pretrained(tmp_path / "mosaics")
    tiny_tokenizer.save_pretrained(tmp_path / "mosaics")
    return tmp_path / "mosaics"


def test_a_pretrained_mosaics_folder_scores_its_own_log_probs(mosaics_dir, tasks, tiny_backbone_dir):
    """A causal LM folder of a type registered by its package (Memory Mosaics), through ``method=backbone``;
    without a KV cache it takes HFLM's path."""
    lm = MlpmemLM(pretrained=str(mosaics_dir), method="backbone", batch_size=2)
    assert not lm._caches
    got = scores(lm, tasks)["tiny_ll"]
    model = MosaicsForCausalLM.from_pretrained(mosaics_dir).eval()
    for doc, (loglik, _) in zip(DOCS, got):
        expected = direct_loglikelihood(backbone_logp(model), lm.tokenizer, doc["context"], doc["target"])
        assert math.isclose(loglik, expected, rel_tol=1e-5, abs_tol=1e-4)
    assert MlpmemLM(pretrained=str(tiny_backbone_dir), method="backbone")._caches  # a Llama keeps its cache
    (mosaics_dir / "tokenizer_config.json").unlink()
    with pytest.raises(ConfigError, match="has no tokenizer"):
        MlpmemLM(pretrained=str(mosaics_dir), method="backbone")
