"""A finished run folder as a transformers model: :func:`augmented_from_run` and :func:`open_run`.

The model is built as ``mlpmem generate`` builds it: the run's trained memory (its stage records checked, its
files against their checksums) on the run's backbone, at the λ the run's evaluation chose on validation unless
one is given, optionally with the run's learned gate (``gate/``) instead of the fixed λ. The result is a
:class:`~mlpmem.inference.hf_model.MemoryAugmentedForCausalLM` whose ``save_pretrained`` writes one folder that
``AutoModelForCausalLM.from_pretrained`` loads.
"""

from __future__ import annotations

from pathlib import Path

from mlpmem.config import read_yaml
from mlpmem.errors import ConfigError
from mlpmem.inference.gate_io import load_gate
from mlpmem.inference.hf_model import MemoryAugmentedForCausalLM
from mlpmem.inference.mixing import check_lambda
from mlpmem.pipeline import records, require
from mlpmem.pipeline.config import PipelineConfig
from mlpmem.pipeline.gate import fixed_lambda, load_run_memory
from mlpmem.pipeline.run import Run

AUTO = "auto"


def open_run(run_dir: str | Path, progress: bool = False) -> Run:
    """The run in ``run_dir`` with the configuration it recorded (``config.yaml``), wherever it is opened from."""
    run_dir = Path(run_dir).expanduser()
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run folder: {path} is missing (run `mlpmem run CONFIG` first)")
    raw = read_yaml(path)
    raw["run_dir"] = str(run_dir)  # the recorded run_dir may be relative to where the run was started
    return Run(PipelineConfig.from_dict(raw), progress=progress, config_file=path)


def run_lambda(run: Run, lam: float | str = AUTO) -> float:
    """``lam`` checked, or with ``"auto"`` the λ the run's evaluation chose on validation (for this memory)."""
    if lam == AUTO:
        return fixed_lambda(run)
    if isinstance(lam, str):
        raise ConfigError(f"lam must be 'auto' or a number in [0, 1], got {lam!r}")
    return check_lambda(lam, "lam")


def check_gate_args(lam, gate, gate_offset, gate_dir, gate_floor) -> None:
    """Refuse the gate's arguments that would be ignored: ``gate`` not a bool (``"false"`` is true), a gate setting
    without ``gate=True``, or a ``lam`` with it (the gate sets λ_t at every position)."""
    if not isinstance(gate, bool):
        raise ConfigError(f"gate must be True or False, got {gate!r}")
    given = {"gate_offset": gate_offset != 0.0, "gate_dir": gate_dir is not None, "gate_floor": gate_floor != 0.0}
    if not gate and any(given.values()):
        raise ConfigError(f"{next(k for k, v in given.items() if v)} needs gate=True (without it the fixed λ is used)")
    if gate and lam != AUTO:
        raise ConfigError(f"lam={lam!r} and gate=True exclude each other: the gate sets λ_t at every position")


def augmented_from_run(run_dir: str | Path | Run, lam: float | str = AUTO, gate: bool = False,
                       gate_offset: float = 0.0, gate_dir: str | Path | None = None,
                       gate_floor: float = 0.0) -> MemoryAugmentedForCausalLM:
    """The memory-augmented model of a finished run: memory at ``lam`` ("auto": the run's), or with ``gate``
    the run's learned gate (``mlpmem gate``; or the one saved with this memory in ``gate_dir``), which then sets
    λ_t per position (its logit shifted by ``gate_offset``; λ_t below ``gate_floor`` exactly 0). ``run_dir`` may be
    a :class:`Run` already opened (its backbone, if loaded, is reused)."""
    check_gate_args(lam, gate, gate_offset, gate_dir, gate_floor)
    run = run_dir if isinstance(run_dir, Run) else open_run(run_dir)
    require(run, ("train",))
    records.check_upstream(run, "train")
    records.check(run, "train")
    memory = load_run_memory(run)  # checksums and finite weights first, then the backbone fingerprint
    lam = run_lambda(run, lam)
    learned = None
    if gate:
        folder = run.layout.gate if gate_dir is None else Path(gate_dir)
        if not (folder / "gate.json").is_file():
            raise ConfigError(f"no learned gate in {folder}: run `mlpmem gate {run.config_file}` first"
                              if gate_dir is None else f"gate_dir {gate_dir} holds no gate (gate.json)")
        learned = load_gate(folder, memory)  # refused unless saved with this memory
        learned.set_offset(gate_offset).set_floor(gate_floor)
    model, tokenizer = run.backbone
    return MemoryAugmentedForCausalLM.from_parts(model, memory, lam=lam, tokenizer=tokenizer, gate=learned,
                                                 backbone_name=run.cfg.backbone.name)
