"""The house's layering, read from the source: every import statement of the product's
packages, at module level or inside a function, checked against the rules (docs/design.md,
"Layout" and "Layering"). A new import against them fails here, named with its file and line.

- store/ is the bottom: of ours it imports only the leaves wakeful.settings and
  wakeful.errors (never the agent kit, the proxy, the web edge, the CLI or tasks/);
- wakeful.agent and wakeful.proxy never import Celery (nor kombu, nor tasks/): they run in
  processes that are not Celery's (the proxy) and in runs apart;
- tasks/ (the Celery shell) never imports the web edge or the CLI, and knows no particular
  agent (no wakeful.agent.claude: an agent offers hooks, agent.summary_of);
- the web edge never imports the agent kit: /metrics and the approval page read the store;
- the leaves at the bottom import nothing of ours: wakeful/errors.py nothing at all,
  wakeful/settings.py only wakeful.errors.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Places whose modules are ours: the installed top-level names (pyproject.toml) and bench/.
OURS = ("store", "tasks", "wakeful", "beat_schedule", "bench")
# leaf -> what of ours it may import
LEAVES = {"wakeful/errors.py": (), "wakeful/settings.py": ("wakeful.errors",)}

# (place, forbidden import prefixes, why)
RULES = (
    ("store", ("wakeful.agent", "wakeful.integrations", "wakeful.proxy", "wakeful.web", "wakeful.cli",
               "wakeful.examples", "wakeful.telemetry", "wakeful.approval_tokens", "wakeful.serving", "tasks",
               "celery", "kombu", "redis"), "store/ is the bottom of the house"),
    ("wakeful/agent", ("celery", "kombu", "tasks", "wakeful.web", "wakeful.cli", "wakeful.integrations"),
     "the agent kit never imports Celery"),
    ("wakeful/integrations", ("celery", "kombu", "tasks", "wakeful.web", "wakeful.cli", "wakeful.examples",
                              "wakeful.proxy"), "a framework integration is a loop on the agent kit"),
    ("wakeful/proxy", ("celery", "kombu", "tasks", "wakeful.agent", "wakeful.web", "wakeful.cli"),
     "the proxy never imports Celery nor the agent kit"),
    ("tasks", ("wakeful.web", "wakeful.cli", "wakeful.examples", "wakeful.agent.claude", "wakeful.integrations"),
     "tasks/ never imports the web edge nor a particular agent"),
    ("wakeful/web", ("wakeful.agent", "wakeful.integrations", "wakeful.cli", "wakeful.examples"),
     "the web edge never imports the agent kit"),
)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    package = ".".join(path.relative_to(root).parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside its own package
                found.append((node.lineno, package + ("." + node.module if node.module else "")))
            elif node.module == "wakeful":  # ``from wakeful import settings`` imports wakeful.settings
                found += [(node.lineno, f"wakeful.{alias.name}") for alias in node.names]
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def sources(place: str, root: Path = ROOT) -> list[Path]:
    path = root / place
    return ([path] if path.exists() else []) if path.suffix == ".py" else sorted(path.rglob("*.py"))


def violations(leaves: dict[str, tuple[str, ...]] = LEAVES, root: Path = ROOT) -> list[str]:
    out = []
    rules = [(place, forbidden, (), why) for place, forbidden, why in RULES]
    rules += [(leaf, OURS, allowed, "a leaf imports nothing of ours") for leaf, allowed in leaves.items()]
    for package, forbidden, allowed, why in rules:
        for path in sources(package, root):
            if "migrations" in path.parts:
                continue
            for line, module in imports(path, root):
                if _under(module, forbidden) and not _under(module, allowed):
                    out.append(f"{path.relative_to(root)}:{line}: imports {module} ({why})")
    return out


def test_no_import_goes_against_the_layering() -> None:
    assert violations() == []


# The probes below are written into a tree of their own (tmp_path), never into the checkout:
# another test process may be reading the checkout at the same moment.

def test_the_check_sees_imports_inside_functions_too(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "probe.py").write_text("def f():\n    from wakeful.web.edge import create_app\n")
    assert violations(root=tmp_path) == ["tasks/probe.py:2: imports wakeful.web.edge "
                                         "(tasks/ never imports the web edge nor a particular agent)"]


def test_the_check_sees_the_web_edge_importing_the_agent_kit(tmp_path: Path) -> None:
    (tmp_path / "wakeful" / "web").mkdir(parents=True)
    (tmp_path / "wakeful" / "web" / "ops.py").write_text("from wakeful.agent.claude import TOTALS_KEY\n")
    assert violations(root=tmp_path) == ["wakeful/web/ops.py:1: imports wakeful.agent.claude "
                                         "(the web edge never imports the agent kit)"]


def test_settings_may_import_errors_and_nothing_else_of_ours(tmp_path: Path) -> None:
    (tmp_path / "leaf.py").write_text("from wakeful import errors\nimport store.records\n")
    found = violations(leaves={"leaf.py": ("wakeful.errors",)}, root=tmp_path)
    assert found == ["leaf.py:2: imports store.records (a leaf imports nothing of ours)"]


def test_a_leaf_importing_anything_of_ours_is_seen(tmp_path: Path) -> None:
    (tmp_path / "leaf.py").write_text("import store.records\n")
    assert violations(leaves={"leaf.py": ()}, root=tmp_path) == [
        "leaf.py:1: imports store.records (a leaf imports nothing of ours)"]


def test_the_installed_top_level_names_are_tasks_store_beat_schedule_and_wakeful() -> None:
    """wakeful runs the user's agent in its own interpreter: a top-level name of ours would
    shadow a user's own ``agent.py`` or ``settings.py`` (docs/design.md, "Layout")."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["py-modules"] == ["beat_schedule"]
    assert setuptools["packages"]["find"]["include"] == ["store*", "tasks*", "wakeful*"]
    in_checkout = ({p.stem for p in ROOT.glob("*.py")}
                   | {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()})
    assert in_checkout - {"bench"} == {"beat_schedule", "store", "tasks", "wakeful"}


def test_the_public_face_loads_nothing_until_a_name_is_used() -> None:
    import subprocess
    import sys

    code = ("import sys, wakeful\n"
            "before = sorted(m for m in sys.modules if m.split('.')[0] in ('wakeful', 'store', 'tasks') and m != 'wakeful')\n"
            "from wakeful import Run, Outcome, Message, TryLater, Toolkit, ToolCall\n"
            "print(before, Run.__module__, Outcome.__module__, TryLater.__module__, Toolkit.__module__)\n"
            "import wakeful as w\n"
            "try:\n    w.Nothing\nexcept AttributeError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[] wakeful.agent.run store.records wakeful.agent.outage wakeful.agent.kit",
        "module 'wakeful' has no attribute 'Nothing'"]


def finishes_outside_runs(root: Path = ROOT) -> list[str]:
    """Calls of ``<something>.finish(...)`` / ``.finish_and_claim(...)`` in tasks/ and wakeful/
    whose receiver is not ``<store>.runs``: the runtime's one door to a run's finish."""
    out = []
    for place in ("tasks", "wakeful"):
        for path in sources(place, root):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("finish", "finish_and_claim")):
                    receiver = node.func.value
                    if isinstance(receiver, ast.Name) and receiver.id in ("store", "s"):
                        out.append(f"{path.relative_to(root)}:{node.lineno}")
                    elif isinstance(receiver, ast.Attribute) and receiver.attr == "store":
                        out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_the_runtime_finishes_a_run_through_store_runs_only(tmp_path: Path) -> None:
    assert finishes_outside_runs() == []
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "probe.py").write_text("def f(store):\n    store.runs.finish(1)\n    store.finish(1)\n")
    assert finishes_outside_runs(tmp_path) == ["tasks/probe.py:3"]
