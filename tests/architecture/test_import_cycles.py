"""No import cycle among our modules: each module can be read, and changed, knowing only
what is below it. Every import counts, at module level, inside a function or under
``TYPE_CHECKING``: a cycle hidden from the interpreter is still one for a reader."""

from __future__ import annotations

import ast
from pathlib import Path

from test_layering import OURS, ROOT


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


# Every package of ours is held to it. A package's ``__init__`` that re-exports names (agent/,
# store/) is above its own modules: they import the module that defines a name, never the
# package, or the package and that module would import each other.
def test_no_import_cycle_among_our_modules() -> None:
    assert cycles(graph()) == []


def importers_of_own_package(edges: dict[str, set[str]], package: str) -> list[str]:
    """The modules inside ``package`` that import the package itself (its ``__init__``)."""
    return sorted(m for m, found in edges.items() if m.startswith(f"{package}.") and package in found)


def test_agent_modules_import_the_defining_module_not_the_package() -> None:
    # agent/__init__.py re-exports the plug-in interface for user code (``from agent import
    # Run``); a module of agent/ importing it would sit both above and below it.
    assert importers_of_own_package(graph(), "agent") == []


def test_the_check_sees_a_module_importing_its_package(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text("from agent.run import Run\n")
    (tmp_path / "agent" / "run.py").write_text("class Run: ...\n")
    (tmp_path / "agent" / "kit.py").write_text("def f():\n    from agent import Run\n")
    assert importers_of_own_package(graph(tmp_path), "agent") == ["agent.kit"]


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    (tmp_path / "store" / "a.py").write_text("from . import b\n")
    (tmp_path / "store" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    assert cycles(graph(tmp_path)) == [["store.a", "store.b"]]
