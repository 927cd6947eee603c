"""SIGKILL at a random point of each stage, rerun: the result equals an uninterrupted run.

The kill point is drawn (seeded) among every rename the stage performs: renames are the commit points of all
atomic writes (shards, records, manifests, checkpoints, the saved memory), and the worker kills itself just
before one, so the temporary file it was about to publish is left behind exactly as a real kill leaves it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from helpers import stage_worker as worker
from helpers.paths import ROOT

WORKER = Path(worker.__file__)


pytestmark = pytest.mark.usefixtures("subprocess_stage_env")
INPUTS = {"datastore": [], "teacher": ["ds"], "train": ["ds", "teacher"]}


def run_worker(backbone_dir, out, stage, kill_at=0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), MLPMEM_TEST_KILL_AT=str(kill_at))
    return subprocess.run([sys.executable, str(WORKER), str(backbone_dir), str(out), stage], capture_output=True,
                          text=True, env=env, timeout=300)


def counted_reference(stage, backbone_dir, out, monkeypatch) -> int:
    """Run the stage in this process, counting its renames."""
    calls = [0]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("replace", "rename"):
            real = getattr(os, name)

            def counting(*args, _real=real, **kwargs):
                calls[0] += 1
                return _real(*args, **kwargs)

            mp.setattr(os, name, counting)
        worker.run_stage(stage, backbone_dir, out)
    return calls[0]


@pytest.fixture(scope="module")
def reference(tiny_backbone_dir, tmp_path_factory):
    """Uninterrupted datastore and teacher that the later stages start from."""
    out = tmp_path_factory.mktemp("reference")
    worker.run_stage("datastore", tiny_backbone_dir, out)
    worker.run_stage("teacher", tiny_backbone_dir, out)
    return out


@pytest.mark.parametrize("stage,seed", [("datastore", 0), ("datastore", 1), ("teacher", 0), ("train", 0)])
def test_sigkill_then_rerun_equals_uninterrupted(stage, seed, reference, tiny_backbone_dir, tmp_path, monkeypatch):
    full, part = tmp_path / "full", tmp_path / "part"
    for folder in (full, part):
        for name in INPUTS[stage]:
            shutil.copytree(reference / name, folder / name)
    renames = counted_reference(stage, tiny_backbone_dir, full, monkeypatch)
    kill_at = int(np.random.default_rng([seed, len(stage)]).integers(1, renames + 1))
    killed = run_worker(tiny_backbone_dir, part, stage, kill_at)
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_worker(tiny_backbone_dir, part, stage)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert int(resumed.stdout.split("renames=")[1]) < renames or kill_at == renames  # work was reused
    if stage == "train":
        a = load_file(str(full / "memory" / "model.safetensors"))
        b = load_file(str(part / "memory" / "model.safetensors"))
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)
        return
    folder = {"datastore": "ds", "teacher": "teacher"}[stage]
    names = sorted(p.name for p in (full / folder).glob("*.npy"))
    assert names == sorted(p.name for p in (part / folder).glob("*.npy"))
    for name in names:
        assert (full / folder / name).read_bytes() == (part / folder / name).read_bytes(), name
    manifests = [json.loads((f / folder / "manifest.json").read_text()) for f in (full, part)]
    assert manifests[0] == manifests[1] and manifests[1]["complete"]
    assert not list((part / folder).glob("*.tmp")) and not list((part / folder).glob("part-*.json"))


def test_finished_stages_rerun_do_nothing(reference, tiny_backbone_dir, monkeypatch):
    before = {p: p.stat().st_mtime_ns for p in reference.rglob("*")}
    assert counted_reference("datastore", tiny_backbone_dir, reference, monkeypatch) == 0
    assert counted_reference("teacher", tiny_backbone_dir, reference, monkeypatch) == 0
    assert before == {p: p.stat().st_mtime_ns for p in reference.rglob("*")}
