"""What differs between the two engines, in one object, so the rules never ask which engine.

PostgreSQL is the production store; SQLite the embedded default. Everything a rule does the
same on both is written once; what one engine can and the other cannot is an attribute here,
and a rule asks for the capability (``Dialect.of(conn).writes_in_ctes``), never the name.

Row locks need no entry: SQLAlchemy renders ``FOR UPDATE [SKIP LOCKED]`` on PostgreSQL and
nothing on SQLite, whose writers ``BEGIN IMMEDIATE`` serializes (store/db.py, with the
engines' timeouts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Insert, Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert


@dataclass(frozen=True)
class Dialect:
    name: str
    # ``INSERT ... ON CONFLICT`` (both engines speak it, each through its own construct).
    insert: Callable[[Table], Insert]
    # The database's clock in integer seconds: the real time, not the transaction's start.
    clock_sql: str
    # A write can ride in another statement as a data-modifying CTE (one round trip less);
    # SQLite has none, so there the write is a statement of its own.
    writes_in_ctes: bool
    # A statement that is a whole transaction may run in autocommit: it commits itself, as
    # durably, in one round trip instead of three. SQLite's writers take BEGIN IMMEDIATE.
    autocommit_statements: bool
    # The hot statements can run as plan-cached functions (store/plans.py, migration 0011).
    plan_functions: bool
    # A list binds as one array parameter (``unnest``): a statement for any number of rows
    # compiles once; elsewhere each count of rows is a statement of its own.
    array_parameters: bool

    @classmethod
    def of(cls, bind: Engine | Connection) -> Dialect:
        return cls.named(bind.dialect.name)

    @staticmethod
    def named(name: str) -> Dialect:
        return _BY_NAME[name]


POSTGRESQL = Dialect(
    name="postgresql",
    insert=pg_insert,
    clock_sql="floor(extract(epoch FROM clock_timestamp()))::bigint",
    writes_in_ctes=True,
    autocommit_statements=True,
    plan_functions=True,
    array_parameters=True,
)

SQLITE = Dialect(
    name="sqlite",
    insert=sqlite_insert,
    clock_sql="CAST(strftime('%s', 'now') AS INTEGER)",
    writes_in_ctes=False,
    autocommit_statements=False,
    plan_functions=False,
    array_parameters=False,
)

_BY_NAME = {d.name: d for d in (POSTGRESQL, SQLITE)}


def per_dialect(build: Callable[[Dialect], Any]) -> dict[str, Any]:
    """A statement built once per engine (at import), looked up with ``for_(bind)``."""
    return {d.name: build(d) for d in _BY_NAME.values()}


def for_(statements: dict[str, Any], bind: Engine | Connection) -> Any:
    """The engine's own statement from a ``per_dialect`` table."""
    return statements[Dialect.of(bind).name]
