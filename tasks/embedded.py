"""The embedded broker: kombu's SQLAlchemy transport on a SQLite file under ./var/.

Chosen over the filesystem transport because it is durable, cross-process, FIFO and stable
under a backlog (measured with kombu 5.7), and ``send_task`` and a separate beat work on it.
Its traps, and what this module does about each:

- transport options go to ``create_engine``, so the poll interval is set on the Transport
  class (:func:`configure`), never in ``broker_transport_options``;
- several processes starting on a fresh file race to create the queue table: :func:`init`
  creates the tables and declares the queues once, before the processes start (``wakeful up``,
  ``wakeful demo``, ``wakeful init``), and is safe to repeat;
- the file is put in WAL mode, so polls do not block on readers;
- consumed rows are never deleted by kombu: :func:`prune` deletes them (``wakeful.purge``);
- kombu caches engines on a class attribute that a forked child inherits; a SQLite
  connection must not cross a fork, so children forget the parent's engines.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import Any

from sqlalchemy.engine import make_url

log = logging.getLogger("wakeful.embedded")

_configured = False


def configure(poll_interval: float) -> None:
    """Set the poll interval and make forked children open their own connections."""
    global _configured
    from kombu.transport import sqlalchemy as sqla

    sqla.Transport.polling_interval = poll_interval
    if not _configured:
        os.register_at_fork(after_in_child=_forget_engines)
        _configured = True


def _forget_engines() -> None:
    from kombu.transport import sqlalchemy as sqla

    for engine, _session in list(sqla.Channel._engines.values()):
        engine.dispose(close=False)  # drop the pool without touching the parent's sockets
    sqla.Channel._engines.clear()


def sqlite_path(url: str) -> str | None:
    """The file behind a ``sqla+sqlite:///`` or ``db+sqlite:///`` URL, else None."""
    for prefix in ("sqla+", "sqlalchemy+", "db+"):
        if url.startswith(prefix):
            url = url[len(prefix):]
            break
    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return parsed.database


def init(app, queues: tuple[str, ...], attempts: int = 5) -> None:
    """Create the broker's tables (and the result backend's), declare the queues. Idempotent."""
    for url in (app.conf.broker_url, app.conf.result_backend):
        path = sqlite_path(url or "")
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with sqlite3.connect(path, timeout=15) as db:
                db.execute("PRAGMA journal_mode=WAL")
    for attempt in range(attempts):
        try:
            with app.connection_for_write() as conn:
                channel = conn.default_channel
                for name in queues:
                    channel._new_queue(name)
            backend = app.backend
            if hasattr(backend, "ResultSession"):
                backend.ResultSession().close()  # creates the result tables
            return
        except Exception as exc:  # another process won the race to create a table
            if attempt == attempts - 1:
                raise
            log.info("embedded broker init raced (%s); retrying", type(exc).__name__)
            time.sleep(0.2 * (attempt + 1))


def migrate_store(url: str, options: dict[str, Any], attempts: int = 5) -> None:
    """Migrate the embedded SQLite store, in a process that is about to fork: the engine is
    disposed before returning, so no SQLite connection crosses the fork."""
    from store import Store

    for attempt in range(attempts):
        store = Store.connect(url, **options)
        try:
            store.migrate()
            return
        except Exception as exc:  # another process is migrating the same fresh file
            if attempt == attempts - 1:
                raise
            log.info("store migration raced (%s); retrying", type(exc).__name__)
            time.sleep(0.3 * (attempt + 1))
        finally:
            store.dispose()


def prune(broker_url: str) -> int:
    """Delete consumed messages (kombu keeps them with visible = 0 forever)."""
    path = sqlite_path(broker_url)
    if not path or not os.path.exists(path):
        return 0
    with sqlite3.connect(path, timeout=15) as db:
        try:
            return db.execute("DELETE FROM kombu_message WHERE visible = 0").rowcount
        except sqlite3.OperationalError:  # no table yet
            return 0
