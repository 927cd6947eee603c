"""The import structure: the library never imports the studies, no private name crosses a package boundary, and no
import cycle between the library's parts or between the studies' modules.

Imports inside functions count as much as those at the top of a module: a function-level import hides a
dependency, it does not remove it. A part is a top-level module or subpackage (``mlpmem.pipeline``,
``mlpmem.training``, ``studies.qa``, ...).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "src" / "mlpmem"
STUDIES = ROOT / "studies"
NOT_LIBRARY = ("studies", "memory_mosaics")
"""Top-level packages the library never imports: the studies and Memory Mosaics import it, not the reverse."""
MOSAICS = ROOT / "src" / "memory_mosaics"


def module_name(path: Path, package: Path = LIBRARY) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def statements(path: Path, package: Path = LIBRARY) -> list[tuple[str, list[str]]]:
    """Every import of ``path`` anywhere in its body as ``(absolute module, imported names)``; ``import a.b`` is
    ``("a.b", [])``."""
    name = module_name(path, package)
    base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (prefix, node.module or "") if p)
            found.append((module, [a.name for a in node.names]))
    return found


def imported(path: Path, modules: set[str], package: Path = LIBRARY) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body."""
    name = module_name(path, package)
    found = set()
    for module, names in statements(path, package):
        for target in [module, *(f"{module}.{n}" for n in names)]:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def files(package: Path) -> dict[str, Path]:
    return {module_name(p, package): p for p in package.rglob("*.py")}


def import_graph(package: Path = LIBRARY) -> dict[str, set[str]]:
    found = files(package)
    return {m: imported(p, set(found), package) for m, p in found.items()}


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``edges`` (its nodes in order, the first repeated at the end), or ``[]``."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node, [node])):
            return found
    return []


def part_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            if part(target) != part(module) and not module.startswith(part(target) + "."):
                edges.setdefault(part(module), set()).add(part(target))
    return edges


def module_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module to module, leaving out a module importing its own package (``__init__`` runs first anyway)."""
    return {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}


def studies_imported(package: Path = LIBRARY, never: tuple[str, ...] = NOT_LIBRARY) -> list[str]:
    """``module -> import`` for every import of a top-level package in ``never`` (by default those the library never
    imports)."""
    return [f"{name} -> {module}" for name, path in files(package).items()
            for module, _ in statements(path, package) if module.split(".")[0] in never]


def private_imports(*packages: Path) -> list[str]:
    """``module -> target._name`` for every private name imported from another part of the packages."""
    ours = tuple(p.name + "." for p in packages)
    bad = []
    for package in packages:
        for name, path in files(package).items():
            for module, names in statements(path, package):
                if not module.startswith(ours) or part(module) == part(name):
                    continue
                private = [n for n in [*module.split(".")[2:], *names] if n.startswith("_") and not n.startswith("__")]
                bad += [f"{name} -> {module}.{n}" for n in private]
    return bad


def test_parts_of_the_library_form_no_cycle():
    found = cycle(part_edges(import_graph()))
    assert not found, "import cycle: " + " -> ".join(found)


def test_modules_of_the_studies_form_no_cycle():
    found = cycle(module_edges(import_graph(STUDIES)))
    assert not found, "import cycle: " + " -> ".join(found)


def test_library_never_imports_studies_or_memory_mosaics():
    bad = studies_imported()
    assert not bad, bad


def test_memory_mosaics_never_imports_studies():
    """The installed package holds no ``studies`` (not part of the wheel): Memory Mosaics builds on mlpmem alone."""
    bad = studies_imported(MOSAICS, ("studies",))
    assert not bad, bad


def test_no_private_name_crosses_a_package_boundary():
    bad = private_imports(LIBRARY, STUDIES, MOSAICS)
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


def test_the_rules_fire_on_a_constructed_package(tmp_path):
    """A private name from another part (or from the library into the studies) is found, one from its own part is
    not; an import of the studies or of Memory Mosaics, even inside a function, is found; so is a cycle."""
    library, studies = tmp_path / "lib", tmp_path / "studies"
    for folder in (library / "a", library / "b", studies / "qa"):
        folder.mkdir(parents=True)
    sources = {
        library / "__init__.py": "", library / "a" / "__init__.py": "", library / "b" / "__init__.py": "",
        library / "a" / "x.py": "from lib.a.y import _own\n_shared = 1\n",
        library / "a" / "y.py": "_own = 1\ndef f():\n    import studies.qa.m\n",
        library / "b" / "z.py": "from lib.a.x import _shared\nfrom ..a import x\n",
        library / "b" / "w.py": "def g():\n    from memory_mosaics.model import M\n",
        studies / "__init__.py": "", studies / "qa" / "__init__.py": "",
        studies / "qa" / "m.py": "from lib.a.x import _shared\nfrom studies.qa.n import h\n",
        studies / "qa" / "n.py": "from studies.qa.m import k\n",
    }
    for path, text in sources.items():
        path.write_text(text)
    assert sorted(private_imports(library, studies)) == ["lib.b.z -> lib.a.x._shared",
                                                         "studies.qa.m -> lib.a.x._shared"]
    assert sorted(studies_imported(library)) == ["lib.a.y -> studies.qa.m", "lib.b.w -> memory_mosaics.model"]
    assert studies_imported(library, ("studies",)) == ["lib.a.y -> studies.qa.m"]
    assert cycle(module_edges(import_graph(studies))) == ["studies.qa.m", "studies.qa.n", "studies.qa.m"]
    assert part_edges(import_graph(library)) == {"lib.b": {"lib.a"}}


def test_importing_the_package_is_light():
    code = "import sys, mlpmem; assert 'torch' not in sys.modules, 'import mlpmem loaded torch'; print(mlpmem.__all__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "MemoryAugmentedForCausalLM" in out.stdout
