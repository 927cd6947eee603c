"""The ``memory-mosaics`` command line: the experiment's commands on mlpmem's CLI machinery
(:mod:`mlpmem.cli.spec`), so its help, one-line errors and exit statuses are ``mlpmem``'s.

``memory-mosaics train|eval|memory CONFIG``: CONFIG is a YAML file or a shipped preset (``small``, ``hour``,
``hour-more-text``, ``gpu``); ``memory-mosaics recall``: the planted-pair recall of tiny models;
``memory-mosaics lm-eval``: ``mlpmem lm-eval`` with Memory Mosaics registered, so ``--model-args
pretrained=<trained model folder>,method=backbone`` scores a trained Memory Mosaics model.
"""

from __future__ import annotations

from mlpmem.cli import spec
from mlpmem.cli.table import COMMANDS as MLPMEM_COMMANDS
from mlpmem.cli.table import QUIET, REBUILD, SET

__all__ = ["PROGRAM", "main"]

COMMANDS_MODULE = "memory_mosaics.experiments.commands"
CONFIG = spec.Arg("config", help="YAML config, or a preset: small, hour, hour-more-text, gpu")
RUN = (CONFIG, SET, REBUILD, QUIET)
MODEL = spec.Arg("--model", choices=f"{COMMANDS_MODULE}:MODELS", default="both",
                 help="which model(s): Memory Mosaics, the matched Transformer, or both")
LM_EVAL = next(c for c in MLPMEM_COMMANDS if c.path == ["lm-eval"])

COMMANDS = (
    spec.Command("train", "", f"{COMMANDS_MODULE}:cmd_mosaics_train",
                 "Memory Mosaics v2 and its matched Transformer: data, tokenizer, training", (*RUN, MODEL)),
    spec.Command("eval", "", f"{COMMANDS_MODULE}:cmd_mosaics_eval",
                 "Memory Mosaics v2 vs Transformer: the three questions, table and plot", (*RUN, MODEL)),
    spec.Command("memory", "", f"{COMMANDS_MODULE}:cmd_mosaics_memory",
                 "an MLP Memory on top of each trained Mosaics/Transformer model", (*RUN, MODEL)),
    spec.Command("recall", "", f"{COMMANDS_MODULE}:cmd_mosaics_recall",
                 "planted key-value recall: tiny Memory Mosaics vs Transformers", (
                     spec.Arg("--steps", type=int, default_from="memory_mosaics.experiments.recall:compare",
                              help="training steps of each tiny model"),
                     spec.Arg("--out", help="also write report.md and results.json to this folder"))),
    spec.Command("lm-eval", "", f"{COMMANDS_MODULE}:cmd_lm_eval",
                 "mlpmem lm-eval on a trained model: pretrained=DIR,method=backbone",
                 LM_EVAL.args),
)

DESCRIPTION = """Memory Mosaics v2 (Zhang & Bottou, NeurIPS 2025) against a matched Llama-style Transformer.

`memory-mosaics train CONFIG`, then `eval`, then `memory` (an MLP Memory on top of each trained model);
CONFIG is a YAML file or a preset name. `memory-mosaics COMMAND --help` for each."""

PROGRAM = spec.Program("memory-mosaics", DESCRIPTION, COMMANDS, {"": "the Memory Mosaics v2 experiment"})


def main(argv: list[str] | None = None) -> int:
    """Run one ``memory-mosaics`` command (see :func:`mlpmem.cli.spec.run`)."""
    return spec.run(PROGRAM, argv)


if __name__ == "__main__":
    raise SystemExit(main())
