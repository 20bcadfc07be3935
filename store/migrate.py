"""Alembic, driven from code: the migrations ship inside the package (``store/migrations``).

The plan-cached functions (store/plans.py) are schema too: a migration that creates or
changes them lists them in ``FUNCTIONS`` (name: its CREATE OR REPLACE statement) and those it
drops in ``DROPPED_FUNCTIONS``, so ``plan_functions`` can say what the head defines.
``python -m store.next_migration`` prints the functions the code expects and the migrations do
not define as written: the ``FUNCTIONS`` of the next migration.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

SCRIPT_LOCATION = "store:migrations"


def config(engine: Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if engine is not None:
        cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(config(engine), revision)


def behind(engine: Engine) -> str | None:
    """Why the database is not at this code's schema (no tables yet, or an older revision),
    in words that say what to run; None when it is at head."""
    from alembic.runtime.migration import MigrationContext

    head = ScriptDirectory.from_config(config()).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current == head:
        return None
    if current is None:
        return "the store's database has no tables yet: run `wakeful init`"
    return f"the store's database is at schema {current}, this wakeful needs {head}: run `wakeful init`"


def plan_functions() -> dict[str, str]:
    """Name -> CREATE statement of every plan function the migrations leave at head."""
    functions: dict[str, str] = {}
    for script in reversed(list(ScriptDirectory.from_config(config()).walk_revisions())):  # oldest first
        functions.update(getattr(script.module, "FUNCTIONS", {}))
        for name in getattr(script.module, "DROPPED_FUNCTIONS", ()):
            functions.pop(name, None)
    return functions


def create_plan_functions(conn: Connection, functions: dict[str, str]) -> None:
    """CREATE OR REPLACE each of ``functions`` (PostgreSQL), serialized against other callers."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('wakeful_plans'))"))
    for create in functions.values():
        conn.exec_driver_sql(create)


def format_functions(functions: dict[str, str]) -> str:
    """``functions`` as a migration's ``FUNCTIONS`` literal."""
    items = "".join(f'    "{name}": """{create}""",\n' for name, create in sorted(functions.items()))
    return "FUNCTIONS = {\n" + items + "}\n"
