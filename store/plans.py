"""The hot statements as plan-cached PL/pgSQL functions, for PostgreSQL behind a pooler.

psycopg prepares a statement once it has run five times on a connection, and PostgreSQL then
reuses its plan. Behind PgBouncer 1.18 in transaction mode that is off (consecutive
transactions may run on different server connections, and PgBouncer keeps no prepared
statements), so every statement is parsed, analysed and planned again on every call
(docs/performance.md has the figures).

A PL/pgSQL function caches the plans of its statements per server connection, whichever
client calls it. So on such an engine the hot statements run inside one each:
``SELECT wakeful_plan_<name>(...)``, every row back as a JSON object. Each function holds
one statement and is VOLATILE, so it sees a fresh snapshot exactly as the statement would.

The functions are schema, so the migrations create and version them (0011 first): each
function's text is generated here from its SQLAlchemy statement, and
``tests/store/test_plans.py`` fails when the text the code expects and the migrations' differ.
``python -m store.next_migration`` prints the functions whose text changed, for the next migration.
This module only calls them. A statement whose function is not there (an old schema) runs
plainly, logged once: slower, never wrong.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Engine
from sqlalchemy.sql import ClauseElement

log = logging.getLogger("wakeful.store")

PREFIX = "wakeful_plan_"
_INFO_KEY = "wakeful_plans"  # in a pooled connection's info: the functions the database has
_PARAM = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class Plan:
    name: str
    create: str  # CREATE OR REPLACE FUNCTION ...
    call: str  # SELECT name(%(p)s::TYPE, ...)
    params: tuple[str, ...]
    defaults: dict[str, Any] = field(hash=False)  # values SQLAlchemy bound itself (LIMIT 1 ...)
    processors: dict[str, Any] = field(hash=False)  # the types' own (JSON: serialized)


@dataclass(frozen=True, eq=False)
class Cached:
    """A hot statement (built once, at import) and the function that runs it on a pooler."""

    statement: Any
    plan: Plan = field(hash=False)


_cached: dict[str, Cached] = {}  # by the function's name


def cached(name: str, statement: Any) -> Cached:
    """Register ``statement`` to run as the function ``wakeful_plan_<name>`` on a pooler."""
    entry = Cached(statement, _plan(PREFIX + name, statement))
    if _cached.setdefault(entry.plan.name, entry) is not entry:
        raise ValueError(f"two statements cached as {name!r}")
    return entry


def registered() -> list[Plan]:
    """Every cached statement's function, by name (once the modules that cache them are imported)."""
    return [_cached[name].plan for name in sorted(_cached)]


def _plan(name: str, statement: ClauseElement) -> Plan:
    dialect = psycopg_dialect()
    compiled = statement.compile(dialect=dialect)
    sql = str(compiled)
    if "POSTCOMPILE" in sql:
        raise ValueError("a statement with expanding parameters cannot be cached as a function")
    names = list(dict.fromkeys(_PARAM.findall(sql)))
    untyped = [n for n in names if compiled.binds[n].type._isnull]
    if untyped:
        raise ValueError(f"give these parameters a type to cache the statement: {untyped}")
    types = [compiled.binds[n].type.compile(dialect=dialect) for n in names]
    body = _PARAM.sub(lambda m: f"${names.index(m.group(1)) + 1}", sql).replace("%%", "%")
    # Kept in a migration's source: no trailing blanks for an editor to strip.
    body = "\n".join(line.rstrip() for line in body.splitlines())
    source = (f"DECLARE r record; BEGIN FOR r IN {body} LOOP RETURN NEXT to_json(r); END LOOP; END")
    create = (f"CREATE OR REPLACE FUNCTION {name}({', '.join(types)}) RETURNS SETOF json "
              f"LANGUAGE plpgsql VOLATILE AS $wakeful$ {source} $wakeful$")
    call = f"SELECT {name}({', '.join(f'%({n})s::{t}' for n, t in zip(names, types))})"
    defaults = {n: v for n, v in compiled.params.items() if n in names and v is not None}
    processors = {n: p for n in names
                  if (p := compiled.binds[n].type.dialect_impl(dialect).bind_processor(dialect))}
    return Plan(name, create, call, tuple(names), defaults, processors)


def use_functions(engine: Engine) -> None:
    """Run this engine's registered statements through their functions: each new connection
    reads which functions the database has."""

    @event.listens_for(engine, "connect")
    def _read_functions(dbapi_connection, record):  # type: ignore[no-untyped-def]
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT proname FROM pg_proc WHERE proname LIKE %s", [PREFIX + "%"])
            record.info[_INFO_KEY] = {row[0] for row in cursor.fetchall()}
        dbapi_connection.commit()  # a no-op in autocommit mode; ends the read otherwise


_warned: set[str] = set()


def execute(conn: Connection, statement: Any, params: dict[str, Any]) -> Any:
    """``conn.execute(statement, params)``; a ``Cached`` statement through its function where
    the engine uses them. The rows answer ``._mapping``, attributes, and the Result methods
    used here."""
    if not isinstance(statement, Cached):
        return conn.execute(statement, params)
    available = conn.info.get(_INFO_KEY)
    plan = statement.plan
    if available is None:
        return conn.execute(statement.statement, params)
    if plan.name not in available:
        if plan.name not in _warned:
            _warned.add(plan.name)
            log.warning("statement function %s is missing: run `wakeful init` (the statement runs "
                        "unprepared meanwhile)", plan.name)
        return conn.execute(statement.statement, params)
    values = {n: params.get(n, plan.defaults.get(n)) for n in plan.params}
    for n, process in plan.processors.items():
        values[n] = process(values[n])
    return Rows([JsonRow(obj) for (obj,) in conn.exec_driver_sql(plan.call, values)])


class JsonRow:
    """One row a function returned, as ``to_json(row)``: keys in column order."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never look a dunder up in the row (copy, pickle)
            raise AttributeError(name)
        try:
            return self._mapping[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"JsonRow({self._mapping!r})"

    def __getitem__(self, index: int) -> Any:
        return list(self._mapping.values())[index]


class Rows(list):
    """The Result methods the store uses, over rows already fetched."""

    def all(self) -> list[JsonRow]:
        return list(self)

    def first(self) -> JsonRow | None:
        return self[0] if self else None

    def one(self) -> JsonRow:
        if len(self) != 1:
            raise ValueError(f"expected one row, got {len(self)}")
        return self[0]

    def one_or_none(self) -> JsonRow | None:
        if len(self) > 1:
            raise ValueError(f"expected at most one row, got {len(self)}")
        return self.first()

    def scalar(self) -> Any:
        return self[0][0] if self else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> Iterable[Any]:
        return [row[0] for row in self]
