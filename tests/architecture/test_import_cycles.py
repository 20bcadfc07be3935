"""No import cycle among our modules: each module can be read, and changed, knowing only
what is below it. Every import counts, at module level, inside a function or under
``TYPE_CHECKING``: a cycle hidden from the interpreter is still one for a reader. So does a
dynamic import of one of our modules named in the source: ``importlib.import_module("m")``,
``pkgutil.resolve_name("m:attr")``, ``import_callable("m:attr")``, ``__import__("m")``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_layering import OURS, ROOT


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


DYNAMIC_IMPORTERS = {"import_module", "resolve_name", "import_callable", "__import__"}


def dynamic_imports(tree: ast.AST) -> set[str]:
    """The modules named by a string literal in a call that imports by name."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            first = node.args[0]
            if name in DYNAMIC_IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value.partition(":")[0])
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each of our modules -> the modules of ours it imports (a package's name stands for its
    ``__init__``)."""
    paths = [p for place in OURS for p in ((root / place).rglob("*.py") if (root / place).is_dir()
                                           else [root / f"{place}.py"])
             if p.exists() and "migrations" not in p.parts]
    modules = {module_name(p, root): p for p in paths}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found: set[str] = dynamic_imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                # ``from package import module`` imports that module; ``from module import
                # name``, the module.
                found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                          for alias in node.names}
        edges[name] = {m for m in found if m in modules and m != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), each as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


# Every package of ours is held to it. A package's ``__init__`` that re-exports names
# (wakeful/agent/, store/) is above its own modules: they import the module that defines a
# name, never the package, or the package and that module would import each other.
def test_no_import_cycle_among_our_modules() -> None:
    assert cycles(graph()) == []


def importers_of_own_package(edges: dict[str, set[str]], package: str) -> list[str]:
    """The modules inside ``package`` that import the package itself (its ``__init__``)."""
    return sorted(m for m, found in edges.items() if m.startswith(f"{package}.") and package in found)


@pytest.mark.parametrize("package", ["wakeful", "wakeful.agent", "store"])
def test_modules_import_the_defining_module_not_the_package(package: str) -> None:
    # wakeful/__init__.py is the agent author's face (``from wakeful import Run``) and
    # wakeful/agent/__init__.py re-exports the plug-in interface; a module under either
    # importing it would sit both above and below it.
    # wakeful/examples/ are the author's side of the face: samples a user copies, which
    # import it as a user's module does (nothing imports them).
    found = importers_of_own_package(graph(), package)
    assert [m for m in found if not m.startswith("wakeful.examples.")] == []


def test_the_check_sees_a_module_importing_its_package(tmp_path: Path) -> None:
    (tmp_path / "wakeful" / "agent").mkdir(parents=True)
    (tmp_path / "wakeful" / "__init__.py").write_text("")
    (tmp_path / "wakeful" / "agent" / "__init__.py").write_text("from wakeful.agent.run import Run\n")
    (tmp_path / "wakeful" / "agent" / "run.py").write_text("class Run: ...\n")
    (tmp_path / "wakeful" / "agent" / "kit.py").write_text("def f():\n    from wakeful.agent import Run\n")
    assert importers_of_own_package(graph(tmp_path), "wakeful.agent") == ["wakeful.agent.kit"]


def test_the_check_sees_a_cycle_through_a_dynamic_import(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    (tmp_path / "store" / "migrate.py").write_text(
        "import importlib\ndef main():\n    importlib.import_module('store.front')\n")
    (tmp_path / "store" / "front.py").write_text("def migrate():\n    from .migrate import main\n")
    assert cycles(graph(tmp_path)) == [["store.front", "store.migrate"]]


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    (tmp_path / "store" / "a.py").write_text("from . import b\n")
    (tmp_path / "store" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    assert cycles(graph(tmp_path)) == [["store.a", "store.b"]]
