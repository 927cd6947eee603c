"""lm-eval's own command line with mlpmem's model types registered first:

    python -m mlpmem.evaluation --model mlpmem --model_args run=runs/quick,lam=auto --tasks ... --include_path ...
    python -m mlpmem.evaluation --model hf --model_args pretrained=<saved folder> --tasks ...

Every option is lm-eval's (``python -m mlpmem.evaluation run --help``).
"""

from __future__ import annotations

import mlpmem.evaluation.harness  # noqa: F401 - registers the mlpmem model types (lm-eval and transformers)


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
