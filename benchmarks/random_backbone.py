"""A randomly initialised causal LM with a shipped model's configuration and tokenizer.

For speed measurements where the weights cannot travel (a lent GPU machine takes 64 MiB of files; the shipped
SmolLM2 GGUF alone is 98 MB): stage throughput depends on the architecture and the corpus, not on the weights.
Quality figures of a run on such a backbone mean nothing and are not reported.

    python benchmarks/random_backbone.py SRC_DIR OUT_DIR   # SRC_DIR: config.json + tokenizer files
"""

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main(src: str, out: str, seed: int = 0) -> None:
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(src)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    for path in Path(src).iterdir():
        if path.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(path, Path(out) / path.name)
    print(f"random {config.model_type} backbone, {sum(p.numel() for p in model.parameters()):,} parameters -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
