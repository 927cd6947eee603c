import json

import numpy as np
import torch

from mlpmem.layout import RunLayout
from mlpmem.memory import MemoryConfig, MLPMemory
from mlpmem.reporting.curves import write_learning_curve
from mlpmem.training.config import TrainConfig
from mlpmem.training.data import EvalData, TrainData
from mlpmem.training.loop import train_memory

V, D, N = 16, 8, 96


def _tiny_run(out):
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(N, D)).astype(np.float16)
    targets = rng.integers(0, V, N).astype(np.int32)
    ids = np.stack([targets, np.full(N, -1)], 1).astype(np.int32)
    probs = np.stack([np.full(N, 0.9), np.zeros(N)], 1).astype(np.float16)
    data = TrainData(keys, targets, ids, probs, np.full(N, 0.1, np.float32))
    val = EvalData(keys[:32], targets[:32], np.full(32, np.log(1 / V), np.float32))
    torch.manual_seed(0)
    memory = MLPMemory(MemoryConfig(input_size=D, vocab_size=V, intermediate_size=16, num_layers=1,
                                    tie_head=False))
    cfg = TrainConfig(epochs=2, batch_size=16, lr=1e-2, eval_every=0.5, eval_lambdas=[0.0, 0.5, 1.0],
                      precision="fp32")
    return train_memory(memory, data, val, cfg, out, progress=False)


def test_learning_curve_png_of_a_tiny_run(tmp_path):
    layout = RunLayout(tmp_path)
    state = _tiny_run(layout.train)
    assert [h["tokens_seen"] for h in state["history"]] == [48, 96, 144, 192]
    layout.knnlm.mkdir()
    layout.knnlm_results.write_text(json.dumps({"validation": {"knnlm_ppl": 12.0, "backbone_ppl": 16.0}}))
    path = write_learning_curve(state, layout.learning_curve, layout.knnlm_results)
    assert path == tmp_path / "learning_curve.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000
    without_knn = write_learning_curve(state, tmp_path / "no-knn.png", tmp_path / "missing.json")
    assert without_knn.stat().st_size > 1000
