"""The store on an event loop (store/transactions.py): a call made inside ``greenlet_spawn``
goes through psycopg's async connections, any other through the threads' engine, and the
store's rules are the same on both."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.util.concurrency import greenlet_spawn

from store import Store
from store.records import InvalidCall


def _drivers(store: Store) -> list[str]:
    """Which kind of connection carried each statement, in order."""
    seen: list[str] = []
    for engine in store.engines:
        kind = "async" if engine.dialect.is_async else "threads"
        event.listen(engine, "before_cursor_execute", lambda conn, *_a, _k=kind: seen.append(_k))
    return seen


def test_calls_inside_greenlet_spawn_await_on_the_loop_and_others_use_threads(pg_url: str) -> None:
    store = Store.connect(pg_url, loop_pool_size=2, lease_ttl=30)
    seen = _drivers(store)
    try:
        assert store.ingest("alice", "webhook", "1", {"text": "hi"})

        async def serve() -> Any:
            start = await greenlet_spawn(store.runs.start, "alice", "w1")
            return start, await greenlet_spawn(store.runs.finish, "alice", "w1", start.generation,
                                               [e.id for e in start.events])

        before = len(seen)
        start, finished = asyncio.run(serve())
        assert [e.source_id for e in start.events] == ["1"] and finished
        assert set(seen[:before]) == {"threads"}
        assert set(seen[before:]) == {"async"}
        # The same store from a thread, while the loop is gone: the threads' engine.
        after = len(seen)
        assert store.release("alice", "w1", start.generation)
        assert set(seen[after:]) == {"threads"}
    finally:
        store.dispose()


def test_a_thousand_runs_on_one_loop_share_its_pool_and_none_is_lost(pg_url: str) -> None:
    """Runs waiting on the loop hold no connection: 200 of them on a pool of 3, each claim
    and finish fenced as on threads."""
    store = Store.connect(pg_url, loop_pool_size=3, lease_ttl=60)
    try:
        inboxes = [f"u{i}" for i in range(200)]
        for name in inboxes:
            store.ingest(name, "webhook", name, {"text": name})

        def run(name: str) -> Any:
            start = store.runs.start(name, f"w-{name}")
            assert start.generation is not None
            return start

        def finish(name: str, start: Any) -> bool:
            return store.runs.finish(name, f"w-{name}", start.generation, [e.id for e in start.events])

        threads_at_start = threading.active_count()

        async def one(name: str) -> bool:
            start = await greenlet_spawn(run, name)
            await asyncio.sleep(0.05)  # the agent's wait: no connection held
            return await greenlet_spawn(finish, name, start)

        async def all_of_them() -> list[bool]:
            return await asyncio.gather(*(one(n) for n in inboxes))

        assert asyncio.run(all_of_them()) == [True] * 200
        assert threading.active_count() <= threads_at_start + 1  # no thread per run
        metrics = store.operator.metrics()
        assert (metrics["events_pending"], metrics["events_running"], metrics["events_dead"]) == (0, 0, 0)
    finally:
        store.dispose()


def test_no_loop_engine_on_sqlite(sqlite_url: str) -> None:
    store = Store.connect(sqlite_url, loop_pool_size=2)
    try:
        assert store.engines == [store.engine]  # SQLite's runs stay on threads
    finally:
        store.dispose()
    from store.db import create

    with pytest.raises(InvalidCall, match="needs PostgreSQL"):
        create(sqlite_url, on_loop=True)
