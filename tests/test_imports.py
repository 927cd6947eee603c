"""The package's import structure: no cycle between its parts, and the library never imports the experiments.

Imports inside functions count as much as those at the top of a module: a function-level import hides a
dependency, it does not remove it. A part is a top-level module or subpackage (``mlpmem.pipeline``,
``mlpmem.training``, ...); the CLI, the application's entry point, may import the experiments.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mlpmem"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str], package: Path = PACKAGE) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body."""
    name = module_name(path, package)
    base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (prefix, node.module or "") if p)
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: imported(p, set(files)) for m, p in files.items()}


def test_parts_form_no_cycle():
    edges: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        for target in targets:
            if part(target) != part(module) and not module.startswith(part(target) + "."):
                edges.setdefault(part(module), set()).add(part(target))
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            assert state.get(nxt) != "open", "import cycle: " + " -> ".join([*path, node, nxt])
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def test_library_never_imports_experiments():
    bad = [f"{m} -> {t}" for m, targets in import_graph().items() for t in targets
           if t.startswith("mlpmem.experiments") and not m.startswith(("mlpmem.experiments", "mlpmem.cli"))]
    assert not bad, bad


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "sub/__init__.py", "sub/c.py"):
        (package / name).write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import c\n")
    (package / "sub" / "c.py").write_text("from ..b import g\n")
    modules = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    assert imported(package / "a.py", modules, package) == {"pkg.sub", "pkg.sub.c"}
    assert imported(package / "sub" / "c.py", modules, package) == {"pkg.b"}


def test_importing_the_package_is_light():
    code = "import sys, mlpmem; assert 'torch' not in sys.modules, 'import mlpmem loaded torch'; print(mlpmem.__all__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "MemoryAugmentedForCausalLM" in out.stdout
