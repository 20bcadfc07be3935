"""The store through PgBouncer in transaction pooling mode (1.18: no prepared statements kept).

Consecutive transactions of one client run on whichever server connection is free, so the
store may keep no session state there: ``pooler="transaction"`` turns psycopg's automatic
prepared statements off and sets the timeouts with ``SET LOCAL`` in each transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from pgbouncer import running_pgbouncer, through
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from store import Outcome, Store

pytestmark = pytest.mark.postgres
T = 1_000_000


@pytest.fixture
def bouncer() -> Iterator[int]:
    with running_pgbouncer() as port:
        yield port


def wakes(store: Store, inbox: str) -> list[int]:
    """Ten wakes of one inbox: well past psycopg's prepare threshold (5) for every hot statement."""
    done = []
    for n in range(10):
        store.ingest(inbox, "chat", f"m-{n}", {"n": n}, now=T + n)
        start = store.runs.start(inbox, "W", now=T + n)
        ids = [e.id for e in start.events]
        step = store.runs.finish_and_claim(inbox, "W", start.generation, ids,
                                           Outcome(messages=[f"reply {n}"], memory={"n": n}), now=T + n)
        assert step.finished and step.released
        done += ids
    return done


def test_the_store_runs_through_pgbouncer_in_transaction_mode(pg_url: str, bouncer: int) -> None:
    store = Store.connect(through(pg_url, bouncer), pooler="transaction", pool_size=4)
    try:
        # Four clients at once, so transactions land on whichever server connection is free.
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: wakes(store, f"inbox-{i}"), range(4)))
        assert all(len(ids) == 10 for ids in results)
        assert [e.status for e in store.events("inbox-0")] == ["done"] * 10
        assert store.runs.memory("inbox-3") == {"n": 9}
        store.add_timer("inbox-0", "tick", T + 100, {"k": 1}, every=60)
        assert [f.inbox for f in store.run_scheduler(now=T + 100)] == ["inbox-0"]
        store.request_approval("inbox-1", "r-1", "refund", 600, now=T + 10)
        assert store.answer_approval("inbox-1", "r-1", "yes", now=T + 11) == "yes"
        sent: list[str] = []
        assert store.dispatch("inbox-2", lambda m: sent.append(m.body), now=T + 20) == 10
        with store.transactions.transaction() as conn:  # the timeouts hold inside every transaction
            assert conn.execute(text("SHOW lock_timeout")).scalar() == "5s"
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "15s"
            # ... and it is one transaction (BEGIN is ours, the driver is in autocommit mode)
            xact = conn.execute(text("SELECT pg_current_xact_id()")).scalar()
            assert conn.execute(text("SELECT pg_current_xact_id()")).scalar() == xact
        try:
            with store.transactions.transaction() as conn:
                conn.execute(text("UPDATE inboxes SET last_sent = 12345 WHERE inbox = 'inbox-0'"))
                raise RuntimeError("abandon the transaction")
        except RuntimeError:
            pass
        with store.transactions.transaction() as conn:  # rolled back whole
            assert conn.execute(text("SELECT last_sent FROM inboxes WHERE inbox = 'inbox-0'")).scalar() != 12345
    finally:
        store.dispose()


def test_without_the_pooler_setting_pgbouncer_refuses_the_session_options(pg_url: str, bouncer: int) -> None:
    store = Store.connect(through(pg_url, bouncer))
    try:
        with pytest.raises(OperationalError, match="unsupported startup parameter: options"):
            store.transactions.clock()
    finally:
        store.dispose()
