"""MemoryAugmentedForCausalLM: one saved folder, the Auto classes, pipeline(), generate, λ = 0, refused folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from helpers.tiny import memory_config_for, tiny_backbone
from mlpmem.backbone import load_backbone
from mlpmem.errors import CorruptArtifact, FingerprintMismatch, MlpmemError
from mlpmem.inference.gate import Gate, GateConfig
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.memory import MLPMemory
from mlpmem.memory.io import save_memory
from mlpmem.utils.checksums import record_folder

PROMPTS = ["The old lighthouse keeper walked", "He counted", "When the storm came in November, the boats"]


def random_memory(model, tokenizer, seed: int = 3) -> MLPMemory:
    """A memory on ``model`` whose logits are spread enough to move the mixture (and the greedy path)."""
    torch.manual_seed(seed)
    memory = MLPMemory(memory_config_for(model, "tiny", tokenizer=tokenizer)).eval()
    with torch.no_grad():
        memory.head.weight.mul_(30.0)
    return memory


def wrapped(backbone_dir, lam: float = 0.4, gate: Gate | None = None) -> MemoryAugmentedForCausalLM:
    model, tokenizer = load_backbone(str(backbone_dir))
    return MemoryAugmentedForCausalLM.from_parts(model, random_memory(model, tokenizer), lam=lam, tokenizer=tokenizer,
                                                 gate=gate)


def encode(tokenizer, texts: list[str]):
    tokenizer.padding_side = "left"
    return tokenizer(texts, return_tensors="pt", padding=True)


@pytest.fixture()
def saved(tmp_path, tiny_backbone_dir):
    model = wrapped(tiny_backbone_dir)
    folder = model.save_pretrained(tmp_path / "mixed")
    return model, folder


def logits_of(model, tokenizer, texts=PROMPTS) -> torch.Tensor:
    with torch.no_grad():
        return model(**encode(tokenizer, texts)).logits


def test_save_writes_one_folder_and_auto_loads_it_with_equal_logits(saved):
    model, folder = saved
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "memory", "memory.sha256.json", "tokenizer.json"} <= names and "backbone" not in names
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "mlpmem" and config["lam"] == 0.4 and config["gate"] is False
    assert (config["key_layer"], config["key_site"]) == (model.key_layer, "ffn_input")
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert isinstance(loaded, MemoryAugmentedForCausalLM) and loaded.lam == 0.4
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert torch.equal(logits_of(loaded, tokenizer), logits_of(model, model.tokenizer))


def test_a_copied_backbone_loads_without_the_original(tmp_path, tiny_llama, tiny_tokenizer):
    source = tmp_path / "source"
    tiny_llama.save_pretrained(source)
    tiny_tokenizer.save_pretrained(source)
    model = wrapped(source)
    folder = model.save_pretrained(tmp_path / "mixed", copy_backbone=True)
    shutil.rmtree(source)
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(logits_of(loaded, loaded.tokenizer), logits_of(model, model.tokenizer))


def test_a_gate_is_saved_and_mixes_after_loading(tmp_path, tiny_backbone_dir):
    torch.manual_seed(1)
    gate = Gate(GateConfig(hidden_size=4, key_dim=2), 32)
    model = wrapped(tiny_backbone_dir, gate=gate)
    folder = model.save_pretrained(tmp_path / "gated")
    assert (folder / "gate" / "gate.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.gate is not None and loaded.config.gate
    assert torch.equal(logits_of(loaded, loaded.tokenizer), logits_of(model, model.tokenizer))
    assert loaded.last_lambda is not None


def test_lambda_zero_is_exactly_the_backbones_log_softmax(tiny_backbone_dir):
    model = wrapped(tiny_backbone_dir, lam=0.0)
    inputs = encode(model.tokenizer, PROMPTS)
    with torch.no_grad():
        expected = F.log_softmax(model.backbone(**inputs).logits.float(), dim=-1)
        assert torch.equal(model(**inputs).logits, expected)


def test_generate_batched_left_padded_equals_one_prompt_at_a_time_and_the_built_model(saved):
    model, folder = saved
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer, settings = loaded.tokenizer, dict(max_new_tokens=6, do_sample=False)
    batch = encode(tokenizer, PROMPTS)
    assert (batch["attention_mask"] == 0).any()  # the batch really is left-padded
    together = loaded.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id)
    assert torch.equal(together, model.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id))
    for row, text in enumerate(PROMPTS):
        alone = loaded.generate(**tokenizer([text], return_tensors="pt"), **settings)
        assert together[row, -6:].tolist() == alone[0, -6:].tolist()
    backbone_only = model.backbone.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id)
    assert not torch.equal(together, backbone_only)  # the memory changes the greedy path


def test_pipeline_text_generation_gives_the_text_of_generate(saved):
    _, folder = saved
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    out = generator(PROMPTS[0], max_new_tokens=6, do_sample=False)[0]["generated_text"]
    ids = model.generate(**tokenizer([PROMPTS[0]], return_tensors="pt"), max_new_tokens=6, do_sample=False)
    assert out == tokenizer.decode(ids[0], skip_special_tokens=True)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_memory_trained_on_another_backbone_is_refused_in_one_line(saved, tmp_path, tiny_tokenizer):
    _, folder = saved
    other = tiny_backbone("llama", seed=7, vocab_size=len(tiny_tokenizer), preset="bpe")
    memory_dir = folder / "memory"
    shutil.rmtree(memory_dir)
    save_memory(random_memory(other, tiny_tokenizer), memory_dir)
    record_folder(memory_dir, ("config.json", "model.safetensors"))  # consistent checksums: only the backbone differs
    with pytest.raises(FingerprintMismatch) as exc:
        AutoModelForCausalLM.from_pretrained(folder)
    assert "weights_sha" in one_line(exc)


def test_a_backbone_reference_to_another_model_is_refused_in_one_line(saved, tmp_path, tiny_tokenizer):
    _, folder = saved
    other = tmp_path / "other"
    tiny_backbone("llama", seed=7, vocab_size=len(tiny_tokenizer), preset="bpe").save_pretrained(other)
    tiny_tokenizer.save_pretrained(other)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "backbone": str(other)}))
    with pytest.raises(FingerprintMismatch) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(folder)
    assert one_line(exc).startswith(f"the model in {folder} was built with backbone")


def test_missing_or_damaged_pieces_are_one_line_errors(saved, tmp_path):
    _, folder = saved
    weights = folder / "memory" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(CorruptArtifact) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(folder)
    assert "checksum" in one_line(exc)
    shutil.rmtree(folder / "memory")
    with pytest.raises(CorruptArtifact) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(folder)
    assert "holds no memory" in one_line(exc)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "backbone": str(tmp_path / "gone")}))
    with pytest.raises(MlpmemError) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(folder)
    assert "cannot load backbone" in one_line(exc)
    with pytest.raises(CorruptArtifact) as exc:
        MemoryAugmentedForCausalLM.from_pretrained(tmp_path)
    assert "not a saved memory-augmented model" in one_line(exc)


def test_save_refuses_a_folder_of_other_files_and_a_backbone_without_a_name(tmp_path, tiny_llama, tiny_tokenizer):
    memory = random_memory(tiny_llama, tiny_tokenizer)
    model = MemoryAugmentedForCausalLM.from_parts(tiny_llama, memory, lam=0.3, tokenizer=tiny_tokenizer)
    with pytest.raises(MlpmemError, match="copy_backbone=True"):
        model.save_pretrained(tmp_path / "by-reference")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(MlpmemError, match="refusing to replace"):
        model.save_pretrained(tmp_path / "busy", copy_backbone=True)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
