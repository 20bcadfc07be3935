"""Engines, transactions and the one clock.

SQLite: every transaction begins ``IMMEDIATE`` (a transaction that may write must take the
write lock up front, or the busy timeout is skipped on the read-to-write upgrade), the file is
in WAL mode, and a busy timeout makes writers queue instead of failing.

PostgreSQL: READ COMMITTED; per-inbox decisions serialize on the inbox row
(``SELECT ... FOR UPDATE``). Every store transaction is short and never waits on the network,
so a long wait means a paused or stuck process holds the lock: ``lock_timeout`` bounds how
long a statement waits for it (``lock_timed_out`` tells that error apart), and
``idle_in_transaction_session_timeout`` ends the session of a client that stalls inside a
transaction. ``pool_pre_ping`` lets pooled connections survive a database restart.

Time is integer seconds. ``now=None`` means the database's clock: ``clock_timestamp()`` on
PostgreSQL (the real time, not the transaction's start that ``now()`` returns), read by the
statement that locks the inbox row (see ``leases.lock``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Insert,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    literal,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from .dialects import Dialect
from .records import InvalidCall

SQLITE_BUSY_TIMEOUT_MS = 10_000

IDLE_IN_TRANSACTION_MS = 15_000  # no store transaction idles for even a second on purpose


POOLERS = ("", "transaction")


def create(url: str, *, pool_size: int = 2, max_overflow: int = 4, lock_timeout: int = 5, pooler: str = "") -> Engine:
    """An engine for ``sqlite:///path`` or ``postgresql+psycopg://...``.

    Create it in the process that uses it (after a prefork fork, never before): a
    connection inherited across ``fork`` corrupts the protocol stream.

    ``pooler="transaction"``: the URL points at a pooler in transaction mode (PgBouncer), where
    consecutive transactions of one client may run on different server connections. Then no
    session state is used: the timeouts are ``SET LOCAL`` at the start of each transaction
    (a startup ``options`` parameter is refused by PgBouncer, and a session ``SET`` would stay
    on a server connection another client gets next), and psycopg's automatic prepared
    statements are off (PgBouncer 1.18 keeps none across transactions).
    """
    if pooler not in POOLERS:
        raise InvalidCall(f"pooler must be one of {POOLERS}, got {pooler!r}")
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, parsed.database)
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        timeouts = {"idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_MS,
                    "lock_timeout": lock_timeout * 1000}
        connect_args: dict[str, Any] = {"application_name": "wakeful"}
        if pooler == "transaction":
            connect_args["prepare_threshold"] = None
        else:
            connect_args["options"] = " ".join(f"-c {k}={v}" for k, v in timeouts.items())
        if pooler == "transaction":
            # The driver in autocommit mode sends no BEGIN of its own; the "begin" hook below
            # sends BEGIN and the SET LOCALs as one simple query: one round trip through the
            # pooler, not two. COMMIT and ROLLBACK are sent as usual (psycopg sends them
            # whenever the server says a transaction is open, autocommit or not).
            isolation = {"isolation_level": "AUTOCOMMIT"}
        else:
            isolation = {}
        engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True,
                               pool_recycle=1800, connect_args=connect_args, **isolation)
        if pooler == "transaction":
            from . import plans

            plans.use_functions(engine)  # plans cached in functions, not prepared statements
            begin = "; ".join(["BEGIN"] + [f"SET LOCAL {k} = {v}" for k, v in timeouts.items()])

            @event.listens_for(engine, "begin")
            def _begin_with_timeouts(conn):  # type: ignore[no-untyped-def]
                # An autocommit statement (an ingest) is a transaction of its own: no BEGIN.
                if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                    conn.exec_driver_sql(begin)

        return engine
    raise InvalidCall(f"unsupported database URL {parsed.render_as_string()!r}: "
                     "use sqlite:///path or postgresql+psycopg://...")


def _sqlite_engine(url: str, path: str | None) -> Engine:
    if path and path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        # Let SQLAlchemy's "begin" hook below issue BEGIN; pysqlite's own would be DEFERRED.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def lock_timed_out(exc: BaseException) -> bool:
    """A PostgreSQL statement gave up waiting for a row lock (SQLSTATE 55P03)."""
    return isinstance(exc, OperationalError) and getattr(exc.orig, "sqlstate", None) == "55P03"


class DbClock(FunctionElement[int]):
    """The database's clock in integer seconds, evaluated by the statement that carries it
    (saves a round trip where nothing else in the transaction needs the value)."""

    type = BigInteger()
    inherit_cache = True


@compiles(DbClock)
def _clock_sql(element: DbClock, compiler: Any, **kw: Any) -> str:
    return Dialect.named(compiler.dialect.name).clock_sql


# For statements built once, at import (the hot path: building a statement costs more
# Python than sending it): the caller's ``p_now`` if it passed one (tests), else the
# database's clock. Their parameters are all named ``p_*``: SQLAlchemy reserves column
# names for the SET and VALUES clauses.
NOW = func.coalesce(bindparam("p_now", type_=BigInteger()), DbClock())


def clock(conn: Connection, now: int | None) -> int:
    """``now`` if the caller passed one (tests), else the database's clock."""
    if now is not None:
        return int(now)
    return int(conn.execute(select(DbClock())).scalar_one())


def clock_expr(now: int | None) -> ColumnElement[int]:
    """``now`` as a bound value, or the database's clock evaluated inside the statement."""
    return literal(int(now)) if now is not None else DbClock()


def insert(conn: Connection, table: Table) -> Insert:
    """The dialect's INSERT, which knows ``ON CONFLICT`` (both engines speak it)."""
    return Dialect.of(conn).insert(table)


def upsert(conn: Connection, table: Table, rows: Sequence[dict[str, Any]], conflict_on: list[str]) -> None:
    """Insert each of ``rows`` (the same columns in each), or overwrite every other column of
    the row that has the same key. One execute for all of them (psycopg pipelines the
    executemany): a claude run's three memory keys cost one call, not three."""
    if not rows:
        return
    stmt = _upsert(Dialect.of(conn).name, table, tuple(rows[0]), tuple(conflict_on))
    params = [{f"p_{c}": v for c, v in row.items()} for row in rows]
    conn.execute(stmt, params if len(params) > 1 else params[0])


def bound_insert(dialect: Dialect, table: Table, columns: Iterable[str]) -> Insert:
    """The dialect's INSERT of ``columns``, each a parameter ``p_<column>`` typed as its
    column: a statement to build once and execute with any values. Built per call, an
    upsert (its EXCLUDED alias) cost more CPU than its round trip (docs/performance.md)."""
    return dialect.insert(table).values({c: bindparam(f"p_{c}", type_=table.c[c].type) for c in columns})


@functools.lru_cache(maxsize=64)
def _upsert(dialect: str, table: Table, columns: tuple[str, ...], conflict_on: tuple[str, ...]) -> Insert:
    stmt = bound_insert(Dialect.named(dialect), table, columns)
    return stmt.on_conflict_do_update(index_elements=list(conflict_on),
                                      set_={c: stmt.excluded[c] for c in columns if c not in conflict_on})
