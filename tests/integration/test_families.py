"""Every common Hugging Face causal-LM family, end to end on a tiny random config built here (no download).

Each family runs the whole pipeline (datastore -> kNN-LM -> teacher -> memory -> eval), then generates a
batch of left-padded prompts with the run's memory, saves the model and reloads it with
``AutoModelForCausalLM.from_pretrained``, which must give the same tokens. The key layer and site rotate over
the families (a middle and the last layer, ``ffn_input`` and ``residual``), so every pair is covered; the
early checks refuse a backbone the memory cannot use before the run folder holds a file.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import transformers as T

import mlpmem.reporting.curves
import mlpmem.reporting.run_report
import mlpmem.utils.shards
from helpers.corpus import write_corpus
from helpers.runs import TINY
from helpers.tiny import left_padded
from mlpmem.backbone import KeyHook, extract_keys
from mlpmem.cli import main
from mlpmem.errors import ConfigError, CorpusError
from mlpmem.memory import MemoryConfig, size_for_backbone
from mlpmem.pipeline.hf_export import augmented_from_run
from mlpmem.pipeline.preflight import check_tokenizer

WIDTH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
LLAMA_LIKE = dict(WIDTH, intermediate_size=64, num_key_value_heads=2, max_position_embeddings=128)
FAMILIES = {
    "llama": (T.LlamaConfig, LLAMA_LIKE),
    "mistral": (T.MistralConfig, LLAMA_LIKE),
    "qwen2": (T.Qwen2Config, LLAMA_LIKE),
    "qwen3": (T.Qwen3Config, dict(LLAMA_LIKE, head_dim=8)),
    "gemma2": (T.Gemma2Config, dict(LLAMA_LIKE, head_dim=8)),
    "gemma3_text": (T.Gemma3TextConfig, dict(LLAMA_LIKE, head_dim=8)),
    "phi3": (T.Phi3Config, LLAMA_LIKE),
    "gpt_neox": (T.GPTNeoXConfig, dict(WIDTH, intermediate_size=64, max_position_embeddings=128)),
    "opt": (T.OPTConfig, dict(WIDTH, ffn_dim=64, max_position_embeddings=128, word_embed_proj_dim=32)),
    "gpt2": (T.GPT2Config, dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "falcon": (T.FalconConfig, WIDTH),
}
KEYS = [(0, "ffn_input"), (-1, "residual"), (-1, "ffn_input"), (0, "residual")]  # a middle and the last layer
"""The (layer, site) pairs the families rotate over: with 2 layers, layer 0 is the middle one."""
PROMPTS = ["The keeper lit the lamp", "In spring"]
FAST = ["--set", "train.epochs=1", "--set", "train.checkpoint_every=1000", "--set", "knnlm.k_grid=[4]",
        "--set", "knnlm.temperature_grid=[10.0]", "--set", "knnlm.lambda_grid=[0.0,0.5]"]


def tiny_family(name: str, tokenizer) -> T.PreTrainedModel:
    config_class, sizes = FAMILIES[name]
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if name != "gpt2":
        special["pad_token_id"] = tokenizer.pad_token_id
    torch.manual_seed(0)
    config = config_class(vocab_size=len(tokenizer), **sizes, **special)
    if name == "gemma2":  # not the default 30, so that the warning names a value set here
        config.final_logit_softcapping = 20.0
    return T.AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("families") / "corpus", 4)


def saved_family(name: str, tokenizer, folder):
    model = tiny_family(name, tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def run_args(backbone, corpus, run_dir, *extra: str) -> list[str]:
    return ["run", TINY, "--quiet", "--set", f"backbone.name={backbone}", "--set", f"corpus.path={corpus}",
            "--set", f"run_dir={run_dir}", *FAST, *extra]


def generate(model, tokenizer) -> torch.Tensor:
    tokenizer.padding_side = "left"
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)


def no_plot(*args) -> None:
    """The report's figures are the same for every family: the tests write an empty file instead."""
    path = args[1]
    open(path, "wb").close()
    return path


@pytest.fixture()
def quick(monkeypatch):
    monkeypatch.setattr(mlpmem.utils.shards, "FSYNC", False)
    monkeypatch.setenv("MLPMEM_THREADS", "1")
    monkeypatch.setattr(mlpmem.reporting.curves, "plot_learning_curve", no_plot)
    monkeypatch.setattr(mlpmem.reporting.run_report, "plot_lambda", no_plot)


@pytest.mark.parametrize("index,name", list(enumerate(FAMILIES)))
def test_family_end_to_end(index, name, tiny_tokenizer, corpus, tmp_path, quick):
    saved_family(name, tiny_tokenizer, tmp_path / "backbone")
    layer, site = KEYS[index % len(KEYS)]
    tied = "false" if index % 2 else "true"
    warns = name == "gemma2" and tied == "true"
    with pytest.warns(UserWarning, match="final_logit_softcapping=20.0") if warns else contextlib.nullcontext():
        assert main(run_args(tmp_path / "backbone", corpus, tmp_path / "run", "--set", f"backbone.layer={layer}",
                             "--set", f"backbone.site={site}", "--set", f"memory.tie_head={tied}")) == 0
    model = augmented_from_run(tmp_path / "run", lam=0.5)
    assert model.memory.config.key_site == site and model.memory.config.activation == "silu"
    tokens = generate(model, tiny_tokenizer)
    assert tokens.shape == (len(PROMPTS), tokens.shape[1]) and tokens.shape[1] > 4
    folder = model.save_pretrained(tmp_path / "export")
    loaded = T.AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(generate(loaded, tiny_tokenizer), tokens)


def test_an_unknown_activation_key_trains_with_the_memorys_own(tiny_tokenizer):
    """Gemma names its activation ``hidden_activation``, Falcon none at all: a random memory never reads it."""
    for name in ("gemma3_text", "falcon"):
        model = tiny_family(name, tiny_tokenizer)
        model.config.hidden_act = model.config.hidden_activation = model.config.activation = "some_new_act"
        config = size_for_backbone(MemoryConfig(tie_head=False), model)
        assert (config.mlp, config.activation, config.norm) == ("gated", "silu", "rmsnorm")


@pytest.mark.parametrize("name", ["gemma2", "gemma3_text", "opt", "falcon"])
@pytest.mark.parametrize("init", ["backbone"])
def test_a_family_the_memory_cannot_mirror_is_refused_before_any_file(name, init, tiny_tokenizer, corpus, tmp_path,
                                                                       capsys):
    saved_family(name, tiny_tokenizer, tmp_path / "backbone")
    code = main(run_args(tmp_path / "backbone", corpus, tmp_path / "run", "--set", f"memory.init={init}"))
    err = capsys.readouterr().err.strip()
    assert code != 0 and f"a {name} backbone" in err and "memory.init: random" in err and "\n" not in err, err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


@pytest.mark.parametrize("name", ["llama", "qwen3", "phi3", "gpt_neox", "gpt2"])
def test_a_family_the_memory_mirrors_starts_as_its_blocks(name, tiny_tokenizer):
    from mlpmem.backbone import decoder_layers
    from mlpmem.memory import MLPMemory, init_from_backbone

    model = tiny_family(name, tiny_tokenizer)
    config = size_for_backbone(MemoryConfig(init="backbone", tie_head=False, num_layers=1), model, key_layer=0)
    memory = MLPMemory(config)
    assert init_from_backbone(memory, model, 1) == [1]
    x = torch.randn(3, 32)
    layer = decoder_layers(model)[1]
    mlp = layer.mlp
    with torch.no_grad():
        torch.testing.assert_close(memory.blocks[0].mlp(x), mlp(x))


def test_early_checks_refuse_a_bad_key_layer_or_tie_before_any_file(tiny_tokenizer, corpus, tmp_path, capsys):
    saved_family("qwen2", tiny_tokenizer, tmp_path / "backbone")
    for extra in (["--set", "backbone.layer=5"], ["--set", "memory.hidden_size=48", "--set", "memory.tie_head=true"]):
        assert main(run_args(tmp_path / "backbone", corpus, tmp_path / "run", *extra)) != 0
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and ("layer 5" in err or "tie_head" in err), err
        assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_size_for_backbone_refuses_a_mismatched_recorded_width(tiny_tokenizer):
    model = tiny_family("mistral", tiny_tokenizer)
    with pytest.raises(ConfigError, match="input_size"):
        size_for_backbone(MemoryConfig(input_size=48), model)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_keys_of_every_layer_and_site_are_the_same_extracted_and_in_a_full_forward(name, tiny_tokenizer):
    """The datastore's truncated key extraction and the hook of the memory at inference read the same keys, for a
    middle and the last layer at both sites, on a left-padded batch."""
    model = tiny_family(name, tiny_tokenizer)
    ids, mask = left_padded([[5, 9, 11, 7, 3], [8, 4]], pad=tiny_tokenizer.pad_token_id)
    for layer, site in KEYS:
        keys = extract_keys(model, ids, mask, layer, site)  # (2, 5, d)
        with torch.no_grad(), KeyHook(model, layer, site) as hook:
            model(input_ids=ids, attention_mask=mask)
        assert keys.shape == (2, 5, 32)
        torch.testing.assert_close(hook.keys, keys, msg=f"{name} {layer} {site}")


class _Tokenizer:
    """Only what the early tokenizer check reads: the special tokens and the vocabulary."""

    def __init__(self, vocab: dict, special: str | None):
        self.vocab, self.bos_token, self.eos_token = vocab, special, special

    def get_vocab(self) -> dict:
        return dict(self.vocab)


def test_early_checks_refuse_a_tokenizer_without_separator_or_with_ids_beyond_the_vocabulary(tiny_tokenizer):
    model = tiny_family("llama", tiny_tokenizer)
    with pytest.raises(CorpusError, match="document-separator"):
        check_tokenizer(model, _Tokenizer({"a": 0}, None))
    with pytest.raises(ConfigError, match="do not belong together"):
        check_tokenizer(model, _Tokenizer({"<s>": 0, "x": 10_000}, "<s>"))
    check_tokenizer(model, tiny_tokenizer)
