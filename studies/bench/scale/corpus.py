"""The corpus-size fixture: a run folder whose training split is a config's training documents repeated.

Its backbone is a random 2-layer Llama with the config's tokenizer, so that millions of tokens encode in minutes
and the backbone is the same constant at every size.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from mlpmem.backbone import load_backbone
from mlpmem.corpora.documents import split_files
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.corpus import corpus_folder
from mlpmem.pipeline.run import Run


def repeated_corpus(config: str, out: Path, repeats: int, overrides: list[str] = ()) -> Path:
    """A run folder whose corpus is ``config``'s training documents repeated ``repeats`` times (validation and
    test unchanged) and whose backbone is a random 2-layer Llama with the config's tokenizer; returns it."""
    cfg = PipelineConfig.from_yaml(config, [*overrides, f"run_dir={out / 'source'}"])
    source = split_files(corpus_folder(Run(cfg, progress=False)))
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    docs = [json.loads(line) for line in source["train"].read_text().splitlines()]
    with open(corpus / "train.jsonl", "w") as f:
        for r in range(repeats):
            f.writelines(json.dumps({"id": f"{d['id']}#{r}", "text": d["text"]}) + "\n" for d in docs)
    for split in ("validation", "test"):
        shutil.copy(source[split], corpus / f"{split}.jsonl")
    raw = cfg.to_dict()
    raw.update(run_dir=str(out / "run"), corpus={**raw["corpus"], "name": None, "path": str(corpus), "max_tokens": {}},
               backbone={**raw["backbone"], "name": str(tiny_backbone(cfg.backbone.name, out.parent / "backbone"))})
    (out / "run").mkdir(parents=True, exist_ok=True)
    (out / "run" / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out / "run"


def tiny_backbone(name: str, folder: Path) -> Path:
    """A random 2-layer Llama (d = 64, seed 0) with the tokenizer of backbone ``name``, saved once to ``folder``."""
    if (folder / "config.json").is_file():
        return folder
    tokenizer = load_backbone(name)[1]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=2048, tie_word_embeddings=True))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
