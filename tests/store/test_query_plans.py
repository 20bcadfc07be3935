"""The hot queries read only live rows: their cost follows due timers and live events, not history.

PostgreSQL only: the planner is asked, after ANALYZE, how it runs the scheduler's and the
claim's queries over a table that is mostly history.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select, text
from sqlalchemy.dialects import postgresql

from store import Store
from store.leases import claimable
from store.claims import CLAIM, TAKE_AND_CLAIM
from store.tables import events, timers
from store.timers import due_now


def plan(store: Store, query) -> str:  # type: ignore[no-untyped-def]
    with store.transactions.transaction() as conn:
        compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
        return "\n".join(conn.execute(text(f"EXPLAIN {compiled}")).scalars())


def test_the_scheduler_reads_due_timers_through_the_partial_index(pg_url: str) -> None:
    store = Store.connect(pg_url)
    try:
        with store.transactions.transaction() as conn:
            conn.execute(text(
                "INSERT INTO timers (inbox, timer_id, due, every, payload, misfire, done) "
                "SELECT 'i' || (n % 100), 't' || n, 2000000 + n, 60, '{}', 'coalesce', n % 2 = 0 "
                "FROM generate_series(1, 50000) AS n"))
            conn.execute(text("ANALYZE timers"))
        query = (select(timers).where(~timers.c.done, timers.c.due <= 2000010).order_by(timers.c.due)
                 .limit(500).with_for_update(skip_locked=True))
        assert "ix_timers_due" in plan(store, query)
        with store.transactions.transaction() as conn:
            assert len(due_now(conn, 2_000_010, 500)) == 5
    finally:
        store.dispose()


@pytest.fixture
def history(pg_url: str) -> Iterator[Store]:
    """50,000 events over 100 inboxes, one in a thousand still pending: mostly history."""
    store = Store.connect(pg_url)
    with store.transactions.transaction() as conn:
        conn.execute(text(
            "INSERT INTO events (inbox, source, source_id, payload, status, created) "
            "SELECT 'i' || (n % 100), 'chat', 'm' || n, '{}', "
            "CASE WHEN n % 1000 = 0 THEN 'pending' ELSE 'done' END, 1 "
            "FROM generate_series(1, 50000) AS n"))
        conn.execute(text("ANALYZE events"))
    yield store
    store.dispose()


def test_a_claim_reads_live_events_through_the_partial_index(history: Store) -> None:
    query = select(events.c.id).where(claimable("i0", None, 2_000_000)).order_by(events.c.id).limit(100)
    assert "ix_events_live" in plan(history, query)


def generic_plan(store: Store, statement, values: dict) -> str:  # type: ignore[no-untyped-def]
    """The plan PostgreSQL keeps for ``statement`` once psycopg has prepared it: a generic
    plan, made without the parameters' values and cached for the connection's life."""
    compiled = statement.compile(dialect=postgresql.dialect(paramstyle="numeric_dollar"))
    # A list parameter (expanding) becomes one $n per item.
    state = compiled.construct_expanded_state(values)
    args = ", ".join(repr(state.parameters[name]) for name in state.positiontup)
    compiled = state.statement
    with store.transactions.transaction() as conn:
        conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        conn.exec_driver_sql(f"PREPARE probe AS {compiled}")
        plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN EXECUTE probe({args})").scalars())
        conn.exec_driver_sql("DEALLOCATE probe")
    return plan


CLAIM_VALUES = {"p_inbox": "i0", "p_gen": 3, "p_now": 2_000_000, "p_limit": 100, "p_max": 3,
                "p_cap_error": "e", "p_cap_prefix": "e: "}


def test_the_claim_keeps_its_index_under_a_generic_plan(history: Store) -> None:
    """psycopg prepares a statement after five executions and PostgreSQL may then plan it once
    for any parameters: the status tests are literals, so even that plan of the claim's own
    UPDATE reads live rows through ix_events_live and never scans the inbox's history (also
    with the lease write in front of it, as start_run sends it)."""
    for statement, values in ((CLAIM.statement, CLAIM_VALUES),
                              (TAKE_AND_CLAIM.statement, {**CLAIM_VALUES, "p_holder": "w", "p_until": 1, "p_took_over": 0})):
        plan = generic_plan(history, statement, values)
        assert "ix_events_live" in plan and "uq_events_key" not in plan, plan
        assert "Seq Scan on events" not in plan, plan


def test_the_next_ready_inbox_is_found_through_the_pending_index(history: Store) -> None:
    """A free worker's look for the next inbox reads the backlog in id order, never history."""
    from store.backlog import _READY

    plan = generic_plan(history, _READY, {"p_now": 2_000_000, "p_skip": ["x"], "p_scan": 8})
    assert "ix_events_pending" in plan and "Seq Scan on events" not in plan, plan
