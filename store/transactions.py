"""``Transactions``: the one way a store call reaches the database.

The engine, the store's settings, and this thread's pinned connection (``pinned``) live
here; the ``Store`` front and every per-concern part hold the same ``Transactions`` and open
each short transaction through it (``transaction``, or ``statement`` for a one-statement
write), so the pinning and the mapping of constraint errors hold for every call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from . import errors
from .db import clock, lock_timed_out
from .dialects import Dialect
from wakeful.settings import StoreSettings


T = TypeVar("T")

# A pinned connection idle longer than this is checked again (see ``Transactions.pinned``).
PINNED_IDLE_SECONDS = 1.0


class Transactions:
    def __init__(self, engine: Engine, settings: StoreSettings | None = None) -> None:
        self.engine = engine
        self.settings = settings or StoreSettings()
        self._pinned = threading.local()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Run this thread's store calls on one pooled connection until the block ends.

        A worker task makes several short transactions (``runs.start``,
        ``runs.finish_and_claim`` ...): pinned, back-to-back ones share one checkout, so one
        pre-ping round trip. After the connection sat idle longer than ``PINNED_IDLE_SECONDS``
        (an agent's long step) it goes back to the pool and the next call checks one out
        again, pre-ping included, so a database restart during a long run costs nothing.
        Nested blocks reuse the outer one."""
        local = self._pinned
        if getattr(local, "conn", None) is not None:
            yield
            return
        local.conn, local.idle_since = self.engine.connect(), time.monotonic()
        try:
            yield
        finally:
            conn, local.conn = local.conn, None
            conn.close()

    @contextmanager
    def unpinned(self) -> Iterator[None]:
        """Inside a ``pinned`` block: give the pinned connection back to the pool for the
        length of this block (an agent's run: seconds of waiting on a model), and pin a fresh
        one at its end. A run holds a connection only inside a transaction, so a process with
        a thousand runs in flight needs a pool the size of its transactions, not of its runs."""
        local = self._pinned
        if getattr(local, "conn", None) is None:
            yield
            return
        local.conn.close()
        local.conn = None
        try:
            yield
        finally:
            local.conn, local.idle_since = self.engine.connect(), time.monotonic()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One short transaction: COMMIT on success, ROLLBACK on any error; a named
        constraint's error raised as the domain error of its rule (store/errors.py)."""
        with errors.mapped():
            with self._begin() as conn:
                yield conn

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        local = self._pinned
        if getattr(local, "conn", None) is None:
            with self.engine.begin() as conn:
                yield conn
            return
        if time.monotonic() - local.idle_since > PINNED_IDLE_SECONDS:
            local.conn.close()
            local.conn = self.engine.connect()
        try:
            with local.conn.begin():
                yield local.conn
        finally:
            local.idle_since = time.monotonic()

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """For one statement that is a whole transaction (an ingest). On PostgreSQL it runs
        in autocommit: the statement commits itself, one round trip instead of three (BEGIN,
        the statement, COMMIT), and as durable. Elsewhere, and on a pinned connection, it is
        an ordinary transaction."""
        if not Dialect.of(self.engine).autocommit_statements or getattr(self._pinned, "conn", None) is not None:
            with self.transaction() as conn:
                yield conn
            return
        with errors.mapped(), self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn

    def deciding(self, decide: Callable[[Connection], T], held: T) -> T:
        """``decide`` in one transaction, or ``held`` when the inbox's row lock did not come
        within ``lock_timeout``: a stuck transaction holds the inbox, as good as held."""
        try:
            with self.transaction() as conn:
                return decide(conn)
        except OperationalError as exc:
            if lock_timed_out(exc):
                return held
            raise

    def clock(self) -> int:
        """The database's clock, integer seconds: the one every stored time is read on."""
        with self.transaction() as conn:
            return clock(conn, None)

    def ping(self) -> None:
        """Raises if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
