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


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    package = path.relative_to(ROOT).parts[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside its own package
                found.append((node.lineno, package + ("." + node.module if node.module else "")))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def sources(place: str) -> list[Path]:
    path = ROOT / place
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def violations(leaves: dict[str, tuple[str, ...]] = LEAVES) -> list[str]:
    out = []
    rules = RULES + tuple((leaf, tuple(o for o in OURS if o not in allowed), "a leaf imports nothing of ours")
                          for leaf, allowed in leaves.items())
    for package, forbidden, why in rules:
        for path in sources(package):
            if "migrations" in path.parts:
                continue
            for line, module in imports(path):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    out.append(f"{path.relative_to(ROOT)}:{line}: imports {module} ({why})")
    return out


def test_no_import_goes_against_the_layering() -> None:
    assert violations() == []


def test_the_check_sees_imports_inside_functions_too(tmp_path: Path) -> None:
    sample = ROOT / "tasks" / "_layering_probe.py"
    sample.write_text("def f():\n    from web.tokens import approval_link\n")
    try:
        assert any("_layering_probe.py:2: imports web.tokens" in v for v in violations())
    finally:
        sample.unlink()


def test_settings_may_import_errors_and_nothing_else_of_ours() -> None:
    sample = ROOT / "_leaf_probe.py"
    sample.write_text("import errors\nimport store.records\n")
    try:
        found = violations(leaves={"_leaf_probe.py": ("errors",)})
        assert any("_leaf_probe.py:2: imports store.records" in v for v in found)
        assert not any("_leaf_probe.py:1:" in v for v in found)
    finally:
        sample.unlink()


def test_a_leaf_importing_anything_of_ours_is_seen() -> None:
    sample = ROOT / "_leaf_probe.py"
    sample.write_text("import store.records\n")
    try:
        assert any("_leaf_probe.py:1: imports store.records" in v
                   for v in violations(leaves={"_leaf_probe.py": ()}))
    finally:
        sample.unlink()
