"""An exported folder in stock tools: transformers' remote-code convention (``auto_map`` and ``modeling_mlpmem.py``
in the folder) loads it with ``trust_remote_code=True`` in a process that never imported mlpmem, and lm-eval's own
``lm_eval --model hf`` command scores it as ``mlpmem lm-eval`` does."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from helpers.fast import quiet_and_fast  # noqa: F401 (autouse: no fsync, one thread)
from helpers.harness import MC_ITEMS, write_mc_task
from helpers.paths import SRC
from helpers.tiny import memory_config_for
from mlpmem.backbone import load_backbone
from mlpmem.cli import main
from mlpmem.inference.hf_folder import AUTO_MAP, REMOTE_CODE
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.memory import MLPMemory

PROMPTS = ["The old lighthouse keeper walked", "He counted", "When the storm came in November, the boats"]

FRESH = """
import sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

folder, out = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
assert not [m for m in sys.modules if m.split(".")[0] == "mlpmem"], "mlpmem imported before loading"
try:
    AutoModelForCausalLM.from_pretrained(folder)
    refused = ""
except ValueError as exc:
    refused = str(exc)
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder)
tokenizer.padding_side = "left"
prompts = sys.argv[3:]
with torch.no_grad():
    logits = model(**tokenizer(prompts, return_tensors="pt", padding=True)).logits
model.save_pretrained(out + "/resaved")
torch.save({"logits": logits, "refused": refused, "config": type(config).__name__, "model": type(model).__name__,
            "lam": model.lam}, out + "/fresh.pt")
"""


def fresh_env(tmp_path) -> dict:
    """This source tree first on the path, offline, and the remote-code copies in ``tmp_path``, not ~/.cache."""
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_MODULES_CACHE": str(tmp_path / "modules"), "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def export(tmp_path_factory, tiny_backbone_dir):
    """A tiny model (λ 0.4, a memory whose logits move the mixture) saved by ``save_pretrained``, and itself."""
    backbone, tokenizer = load_backbone(str(tiny_backbone_dir))
    torch.manual_seed(3)
    memory = MLPMemory(memory_config_for(backbone, "tiny", tokenizer=tokenizer)).eval()
    with torch.no_grad():
        memory.head.weight.mul_(3.0)
    model = MemoryAugmentedForCausalLM.from_parts(backbone, memory, lam=0.4, tokenizer=tokenizer)
    return model, model.save_pretrained(tmp_path_factory.mktemp("export") / "tiny-export")


def test_the_folder_carries_its_remote_code(export):
    _, folder = export
    assert json.loads((folder / "config.json").read_text())["auto_map"] == AUTO_MAP
    code = (folder / REMOTE_CODE).read_text()
    assert "from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM" in code
    # where mlpmem is imported its registered classes load the folder as before, with no trust_remote_code asked
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert isinstance(reloaded, MemoryAugmentedForCausalLM) and reloaded.config.auto_map == AUTO_MAP


def test_a_fresh_process_loads_it_with_trust_remote_code_and_equal_logits(export, tmp_path):
    model, folder = export
    proc = subprocess.run([sys.executable, "-c", FRESH, str(folder), str(tmp_path), *PROMPTS], env=fresh_env(tmp_path),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = torch.load(tmp_path / "fresh.pt", weights_only=True)
    assert "trust_remote_code=True" in fresh["refused"]  # without it: transformers' own refusal, no silent load
    assert (fresh["config"], fresh["model"], fresh["lam"]) == ("MemoryAugmentedConfig", "MemoryAugmentedForCausalLM",
                                                               0.4)
    model.tokenizer.padding_side = "left"
    with torch.no_grad():
        ours = model(**model.tokenizer(PROMPTS, return_tensors="pt", padding=True)).logits
    torch.testing.assert_close(fresh["logits"], ours, rtol=0, atol=1e-5)
    # saved again after a remote-code load: still our one file, not a copy of mlpmem's own modules
    resaved = tmp_path / "resaved"
    assert sorted(p.name for p in resaved.glob("*.py")) == [REMOTE_CODE]
    assert json.loads((resaved / "config.json").read_text())["auto_map"] == AUTO_MAP


def test_stock_lm_eval_scores_the_folder_as_mlpmem_lm_eval_does(export, tmp_path, capsys):
    """``lm_eval --model hf --model_args pretrained=FOLDER,trust_remote_code=True`` (lm-eval's own command, in a
    process that does not import mlpmem first) gives every request the log-likelihood ``mlpmem lm-eval`` gives it."""
    _, folder = export
    tasks = write_mc_task(tmp_path)
    stock = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
         f"pretrained={folder},trust_remote_code=True", "--tasks", "tiny_mc", "--include_path", str(tasks),
         "--device", "cpu", "--batch_size", "2", "--log_samples", "--output_path", str(tmp_path / "stock")],
        env=fresh_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert stock.returncode == 0, stock.stderr[-3000:]
    (samples,) = glob.glob(str(tmp_path / "stock" / "*" / "samples_tiny_mc_*.jsonl"))
    theirs = sorted((json.loads(line) for line in open(samples)), key=lambda s: s["doc_id"])
    out = tmp_path / "ours.json"
    assert main(["lm-eval", "--tasks", "tiny_mc", "--include-path", str(tasks), "--local-only", "--model-args",
                 f"pretrained={folder}", "--device", "cpu", "--log-samples", "--output", str(out)]) == 0
    capsys.readouterr()
    ours = sorted(json.loads(out.read_text())["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    assert len(ours) == len(theirs) == len(MC_ITEMS)
    gaps = []
    for a, b in zip(ours, theirs):
        assert len(a["resps"]) == len(b["resps"])
        gaps += [abs(float(x[0][0]) - float(y[0][0])) for x, y in zip(a["resps"], b["resps"])]
        assert (a["acc"], a["acc_mutual_info"]) == (b["acc"], b["acc_mutual_info"])
    print(f"stock lm_eval vs mlpmem lm-eval: {len(gaps)} requests, max |Δ log-likelihood| {max(gaps):.3g}, "
          f"acc {[a['acc'] for a in ours]}, acc_mutual_info {[a['acc_mutual_info'] for a in ours]}")
    assert max(gaps) < 1e-4  # fp32 rounding only (mlpmem lm-eval runs a shared context once)
