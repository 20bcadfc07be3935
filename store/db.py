"""Engines, transactions and the one clock.

SQLite: every transaction begins ``IMMEDIATE`` (a transaction that may write must take the
write lock up front, or the busy timeout is skipped on the read-to-write upgrade), the file is
in WAL mode, and a busy timeout makes writers queue instead of failing.

PostgreSQL: READ COMMITTED; per-inbox decisions serialize on the inbox row
(``SELECT ... FOR UPDATE``). Every store transaction is short and never waits on the network,
so a long wait means a paused or stuck process holds the lock: ``lock_timeout`` bounds how
long a statement waits for it (``lock_timed_out`` tells that error apart), and
``idle_in_transaction_session_timeout`` ends the session of a client that stalls inside a
transaction. A pooled connection that sat unused for a while is pinged before it is handed
out (``_ping_when_idle``), so the pool survives a database restart.

Time is integer seconds. ``now=None`` means the database's clock: ``clock_timestamp()`` on
PostgreSQL (the real time, not the transaction's start that ``now()`` returns), read by the
statement that locks the inbox row (see ``leases.lock``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

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
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InvalidatePoolError, OperationalError

SQLITE_BUSY_TIMEOUT_MS = 10_000

_PG_NOW = "floor(extract(epoch FROM clock_timestamp()))::bigint"
_SQLITE_NOW = "CAST(strftime('%s', 'now') AS INTEGER)"


IDLE_IN_TRANSACTION_MS = 15_000  # no store transaction idles for even a second on purpose

# A pooled connection unused for longer than this is pinged ("SELECT 1") when checked out.
# One used moments ago is handed out as is: a worker's back-to-back tasks and ingests skip a
# round trip each (with pool_pre_ping it was one in two of an ingest's). A connection that
# died within this window fails its next statement, which changes nothing and invalidates
# the pool, as if the restart had happened during that statement.
IDLE_PING_SECONDS = 1.0


def create(url: str, *, pool_size: int = 2, lock_timeout: int = 5) -> Engine:
    """An engine for ``sqlite:///path`` or ``postgresql+psycopg://...``.

    Create it in the process that uses it (after a prefork fork, never before): a
    connection inherited across ``fork`` corrupts the protocol stream.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, parsed.database)
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=4,
            pool_recycle=1800,
            connect_args={
                "options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
                           f" -c lock_timeout={lock_timeout * 1000}",
                "application_name": "wakeful",
            },
        )
        _ping_when_idle(engine)
        return engine
    raise ValueError(f"unsupported database URL {parsed.render_as_string()!r}: "
                     "use sqlite:///path or postgresql+psycopg://...")


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping``, but only for a connection idle longer than ``IDLE_PING_SECONDS``.

    A caller that kept a connection checked out while idle (``Store.pinned``) records when
    it last used it in ``Connection.info["last_used"]`` before giving it back."""

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection, record):  # type: ignore[no-untyped-def]
        record.info["idle_since"] = record.info.pop("last_used", None) or time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, proxy):  # type: ignore[no-untyped-def]
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since <= IDLE_PING_SECONDS:
            return  # a new connection, or one used moments ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            # As pool_pre_ping does: drop this connection and every one pooled before it
            # (a restart killed them all); the pool retries with a new connection.
            raise InvalidatePoolError(f"pre-ping failed: {exc}") from exc


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


def is_postgres(engine_or_conn: Engine | Connection) -> bool:
    return engine_or_conn.dialect.name == "postgresql"


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One short transaction: COMMIT on success, ROLLBACK on any error."""
    with engine.begin() as conn:
        yield conn


class DbClock(FunctionElement[int]):
    """The database's clock in integer seconds, evaluated by the statement that carries it
    (saves a round trip where nothing else in the transaction needs the value)."""

    type = BigInteger()
    inherit_cache = True


@compiles(DbClock, "postgresql")
def _pg_clock(element: DbClock, compiler: Any, **kw: Any) -> str:
    return _PG_NOW


@compiles(DbClock, "sqlite")
def _sqlite_clock(element: DbClock, compiler: Any, **kw: Any) -> str:
    return _SQLITE_NOW


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
    return dialect_insert(conn.dialect.name, table)


def dialect_insert(dialect: str, table: Table) -> Insert:
    return (pg_insert if dialect == "postgresql" else sqlite_insert)(table)


def upsert(conn: Connection, table: Table, values: dict[str, Any], conflict_on: list[str]) -> None:
    """Insert ``values``, or overwrite every other column of the row that has the same key."""
    stmt = insert(conn, table).values(**values)
    update = {c: stmt.excluded[c] for c in values if c not in conflict_on}
    conn.execute(stmt.on_conflict_do_update(index_elements=conflict_on, set_=update))
