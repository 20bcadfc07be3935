"""The house's layering, read from the source: every import statement of the product's
packages, at module level or inside a function, checked against the rules (DESIGN.md
section 3 and issue 26). A new import against them fails here, named with its file and line.

- store/ is the bottom: it imports nothing of agent, proxy, web, tasks or cli;
- agent/ and proxy/ never import Celery (nor kombu, nor tasks/): they run in processes that
  are not Celery's (the proxy) and in runs apart;
- tasks/ (the Celery shell) never imports web/, and knows no particular agent (no
  agent.claude: an agent offers hooks, agent.summary_of);
- the leaves at the bottom import nothing of ours: errors.py nothing at all, settings.py only
  errors.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("store", "agent", "proxy", "web", "tasks", "cli")
OURS = PACKAGES + ("approval_tokens", "beat_schedule", "errors", "serving", "settings", "telemetry")
# leaf -> what of ours it may import
LEAVES = {"errors.py": (), "settings.py": ("errors",)}

# (package, forbidden import prefixes, why)
RULES = (
    ("store", ("agent", "proxy", "web", "tasks", "cli"), "store/ is the bottom of the house"),
    ("agent", ("celery", "kombu", "tasks"), "agent/ never imports Celery"),
    ("proxy", ("celery", "kombu", "tasks"), "proxy/ never imports Celery"),
    ("tasks", ("web", "agent.claude"), "tasks/ never imports web/ nor a particular agent"),
)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    package = path.relative_to(root).parts[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside its own package
                found.append((node.lineno, package + ("." + node.module if node.module else "")))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def sources(place: str, root: Path = ROOT) -> list[Path]:
    path = root / place
    return ([path] if path.exists() else []) if path.suffix == ".py" else sorted(path.rglob("*.py"))


def violations(leaves: dict[str, tuple[str, ...]] = LEAVES, root: Path = ROOT) -> list[str]:
    out = []
    rules = RULES + tuple((leaf, tuple(o for o in OURS if o not in allowed), "a leaf imports nothing of ours")
                          for leaf, allowed in leaves.items())
    for package, forbidden, why in rules:
        for path in sources(package, root):
            if "migrations" in path.parts:
                continue
            for line, module in imports(path, root):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    out.append(f"{path.relative_to(root)}:{line}: imports {module} ({why})")
    return out


def test_no_import_goes_against_the_layering() -> None:
    assert violations() == []


# The probes below are written into a tree of their own (tmp_path), never into the checkout:
# another test process may be reading the checkout at the same moment.

def test_the_check_sees_imports_inside_functions_too(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "probe.py").write_text("def f():\n    from web.edge import create_app\n")
    assert violations(root=tmp_path) == ["tasks/probe.py:2: imports web.edge "
                                         "(tasks/ never imports web/ nor a particular agent)"]


def test_settings_may_import_errors_and_nothing_else_of_ours(tmp_path: Path) -> None:
    (tmp_path / "leaf.py").write_text("import errors\nimport store.records\n")
    found = violations(leaves={"leaf.py": ("errors",)}, root=tmp_path)
    assert found == ["leaf.py:2: imports store.records (a leaf imports nothing of ours)"]


def test_a_leaf_importing_anything_of_ours_is_seen(tmp_path: Path) -> None:
    (tmp_path / "leaf.py").write_text("import store.records\n")
    assert violations(leaves={"leaf.py": ()}, root=tmp_path) == [
        "leaf.py:1: imports store.records (a leaf imports nothing of ours)"]
