"""Test helpers shared by every test folder (importable as ``helpers``: ``pythonpath = ["tests"]`` in pyproject).

``tiny`` builds the tiny random backbones and their tokenizers, ``corpus`` the small deterministic documents,
``encoders`` a stand-in sentence encoder, ``harness`` the lm-eval adapter's local tasks and direct scores,
``bigbench`` a stand-in BIG-bench archive, ``paths`` the repository's folders, and ``stage_worker`` runs
stages in a subprocess (a script, see its docstring).
"""
