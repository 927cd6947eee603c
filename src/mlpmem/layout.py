"""Every path of a run folder, in one place (:class:`RunLayout`).

    run_dir/
      config.yaml            the resolved configuration
      corpus/                prepared splits (for raw user corpora)
      tokens/<split>/        each split tokenized once into a memory-mapped token stream
      datastore/             training keystore = the kNN datastore (keys, next tokens)
      eval/{validation,test} evaluation keystores (keys, next tokens, backbone log-probs)
      knnlm/                 neighbour lists of the evaluation queries (knnlm/<split>/), the sweep, results.json
      teacher/               sparse top-K kNN targets for every datastore position
      train/                 the memory's resumable checkpoint and training state
      memory/                the trained memory (config.json + model.safetensors)
      learning_curve.png     validation perplexity during training
      results.json, report.md, lambda.png   the evaluation
      timings.json           seconds and tokens/s of every stage
      ablations/<study>/     variants of the memory trained on this run's datastore
      gate/                  the learned gate (gate.json + gate.safetensors), its feature cache and report
      maintenance/           documents added or forgotten since the run was built, and each operation's record
      stages/<stage>.json    what each stage was built from (the settings it depends on), checked on reuse
      memory.sha256.json     the checksums of memory/'s files, checked whenever the memory is loaded
      .lock                  held by the command writing the folder (pid, host, command)

The stages (:mod:`mlpmem.pipeline`), the reports and the experiments all name these paths through
:class:`RunLayout`; no module spells a run folder's file names itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

WRITTEN = frozenset({"config.yaml", "corpus", "tokens", "datastore", "eval", "knnlm", "teacher", "train", "memory",
                     "learning_curve.png", "results.json", "report.md", "lambda.png", "timings.json", "ablations",
                     "stages", "memory.sha256.json", ".lock", "train-bench", "bench-report.md", "bench-results.json",
                     "gate", "maintenance"})
"""Every name mlpmem writes at the top of a run folder (``train-bench``, ``bench-*``: the offline benchmark's, which
runs in a folder of its own), besides temporaries (:func:`is_written`)."""


TRAIN_WRITTEN = frozenset({"checkpoint", "best", "train_state.json"})
"""Every name the training writes in ``train/`` (:func:`is_train_written`)."""


def is_train_written(name: str) -> bool:
    """Whether the training writes an entry of this name in ``train/``: a name of :data:`TRAIN_WRITTEN`, a
    temporary, or the swap folders of a checkpoint (``checkpoint.old``) or of the best weights (``.best.old<pid>``)."""
    return (name in TRAIN_WRITTEN or name.endswith(".tmp") or name in ("checkpoint.old",)
            or name.startswith((".best.tmp", ".best.old", "checkpoint.tmp")))


def is_written(name: str) -> bool:
    """Whether mlpmem writes an entry of this name at the top of a run folder: a name of :data:`WRITTEN`, a
    temporary (``*.tmp``) or the memory's swap folders (``.memory.tmp<pid>``, ``.memory.old<pid>``)."""
    return name in WRITTEN or name.endswith(".tmp") or name.startswith((".memory.tmp", ".memory.old"))


@dataclass(frozen=True)
class RunLayout:
    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    def tokens(self, split: str) -> Path:
        return self.root / "tokens" / split

    @property
    def datastore(self) -> Path:
        return self.root / "datastore"

    def keystore(self, split: str) -> Path:
        """The training datastore for ``train``, else the evaluation keystore of ``split``."""
        return self.datastore if split == "train" else self.root / "eval" / split

    @property
    def knnlm(self) -> Path:
        return self.root / "knnlm"

    @property
    def knnlm_results(self) -> Path:
        return self.knnlm / "results.json"

    def neighbours(self, split: str) -> Path:
        """The cached neighbour lists (``dists.npy``, ``ids.npy``) of one evaluation split."""
        return self.knnlm / split

    @property
    def teacher(self) -> Path:
        return self.root / "teacher"

    @property
    def train(self) -> Path:
        return self.root / "train"

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def results(self) -> Path:
        return self.root / "results.json"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def lambda_plot(self) -> Path:
        return self.root / "lambda.png"

    @property
    def learning_curve(self) -> Path:
        """Validation perplexity against training tokens (written by the train stage)."""
        return self.root / "learning_curve.png"

    @property
    def timings(self) -> Path:
        return self.root / "timings.json"

    def record(self, stage: str) -> Path:
        """What ``stage`` was built from (:mod:`mlpmem.pipeline.records`)."""
        return self.root / "stages" / f"{stage}.json"

    @property
    def memory_checksums(self) -> Path:
        """The sha256 of ``memory/``'s files (:mod:`mlpmem.utils.checksums`)."""
        return self.root / "memory.sha256.json"

    @property
    def lock(self) -> Path:
        """The run folder's lock (:mod:`mlpmem.utils.lock`)."""
        return self.root / ".lock"

    @property
    def gate(self) -> Path:
        """The learned gate of the memory (:mod:`mlpmem.inference.gate_io`), its features and report."""
        return self.root / "gate"

    @property
    def maintenance(self) -> Path:
        """What ``mlpmem update`` / ``forget`` changed (:mod:`mlpmem.maintenance`): its manifest, the added
        documents' texts and the operation in progress."""
        return self.root / "maintenance"


def stage_seconds(timing: dict) -> float | None:
    """A stage's time for all its rows from its ``timings.json`` entry: the seconds it measured, scaled up to the
    rows it found already built when it resumed (``resumed_after``), at its measured rate; None without an entry."""
    if not timing:
        return None
    resumed = timing.get("resumed_after", 0)
    return timing["seconds"] * (1 + resumed / timing["tokens"]) if resumed else timing["seconds"]
