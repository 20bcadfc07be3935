"""The hot statements as plan-cached functions (store/plans.py), for PostgreSQL behind a
transaction pooler: created by the migrations as the SQLAlchemy statements compile, used
by an engine with ``pooler="transaction"``; a missing one falls back to the plain statement.
(These run direct to PostgreSQL: the pooler setting is what switches them on, and
test_pgbouncer.py runs the same store calls through a real PgBouncer.)"""

from __future__ import annotations

import logging
import uuid

import pytest
from databases import create_pg_database, drop_pg_database
from sqlalchemy import event, text

from store import Outcome, Store, backlog, migrate, plans, steps

pytestmark = pytest.mark.postgres
T = 1_000_000


def _statements(store: Store) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *args: seen.append(statement))
    return seen


def _a_day_of_wakes(store: Store) -> list[tuple]:
    """Wakes through every registered statement's path, and what each call answered."""
    answers: list[tuple] = []
    store.intake.ingest_many([(f"in-{n}", "chat", f"m-{n}", {"n": n, "nested": {"list": [1, 2]}}) for n in range(6)], now=T)
    got = store.runs.start_next("W", now=T + 1)  # the take, leased and claimed
    assert got is not None
    inbox, start = got
    answers.append((inbox, start.generation, [(e.source_id, e.payload, e.attempts) for e in start.events]))
    step = store.runs.finish_and_claim(inbox, "W", start.generation, [e.id for e in start.events],
                                       Outcome(memory={"k": "v"}), now=T + 2)
    answers.append((step.finished, step.released, step.events))
    start = store.runs.start("in-1", "W", now=T + 3)  # a doorbell's start: lock_or_create
    answers.append((start.generation, [e.source_id for e in start.events]))
    answers.append(store.finish("in-1", "W", start.generation, [e.id for e in start.events], Outcome(), now=T + 4))
    answers.append(store.renew("in-1", "W", start.generation, now=T + 4))
    answers.append(store.release("in-1", "W", start.generation, now=T + 4))
    skipped = store.runs.start_next("W", skip=["in-2"], now=T + 5)  # the skipping take: plain
    assert skipped is not None
    answers.append(skipped[0])
    inbox, start = skipped  # a drainer's finish: the release and the next take in one statement
    step = store.runs.finish_and_claim(inbox, "W", start.generation, [e.id for e in start.events], now=T + 6,
                                       take_next=[])
    assert step.next is not None
    answers.append((step.released, step.next[0], [e.source_id for e in step.next[1].events]))
    answers.append([(r.inbox, r.generation, r.outcome, list(r.event_ids)) for i in range(6) for r in store.operator.run_log(f"in-{i}")])
    return answers


def test_behind_a_pooler_the_hot_statements_run_as_functions_and_answer_alike(pg_url: str) -> None:
    plain = Store.connect(pg_url)
    pooled = Store.connect(pg_url, pooler="transaction")
    try:
        seen = _statements(pooled)
        first = _a_day_of_wakes(pooled)
        calls = [s for s in seen if "wakeful_plan_" in s]
        assert len(calls) >= 8  # take, claim, finish, lock, resign-or-extend, lock_or_create ...
        for statement in (backlog.LOG_RESIGN_AND_TAKE, steps._HOLD_AND_DONE):
            assert any(statement.plan.name in s for s in calls)
        assert not any(s.lstrip().startswith("WITH picked") for s in seen)  # the claim ran inside
        # The same calls through the plain statements, on the same data from the start:
        with plain.transactions.transaction() as conn:
            conn.execute(text("TRUNCATE events, inboxes, runs, memory RESTART IDENTITY"))
        assert _a_day_of_wakes(plain) == first
    finally:
        plain.dispose()
        pooled.dispose()


def test_a_missing_function_falls_back_to_the_plain_statement(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from store import claims

    name = claims.TAKE_AND_CLAIM.plan.name
    admin = Store.connect(pg_url)
    with admin.transactions.transaction() as conn:
        conn.execute(text(f"DROP FUNCTION {name}"))
    pooled = Store.connect(pg_url, pooler="transaction")
    try:
        seen = _statements(pooled)
        with caplog.at_level(logging.WARNING, logger="wakeful.store"):
            answers = _a_day_of_wakes(pooled)
        assert answers[0][2] and answers[1][0]  # claimed and finished all the same
        assert any(s.lstrip().startswith("WITH picked") for s in seen)  # the plain claim
        assert any(name in r.getMessage() and "wakeful init" in r.getMessage() for r in caplog.records)
        admin.migrate()  # init again: the function is back (idempotent for the others)
        with admin.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname = :n"), {"n": name}).scalar() == 1
    finally:
        admin.dispose()
        pooled.dispose()


def test_every_registered_statement_compiles_into_a_function() -> None:
    assert len(plans.registered()) >= 8
    for plan in plans.registered():
        assert plan.create.startswith(f"CREATE OR REPLACE FUNCTION {plan.name}(")
        assert "%(" not in plan.create and plan.call.count("%(") == len(plan.params)


def test_the_migrations_define_each_function_as_the_code_compiles_it() -> None:
    """The function a statement runs as is schema: when a statement changes (or goes), a new
    migration must say so. ``python -m store.next_migration`` prints what it must define."""
    expected = {plan.name: plan.create for plan in plans.registered()}
    written = migrate.plan_functions()
    assert sorted(written) == sorted(expected), "a plan function the code does not call, or one no migration creates"
    for name, create in expected.items():
        assert written[name] == create, f"{name} changed: run python -m store.next_migration and write the next migration"


def test_the_migrations_alone_create_exactly_the_functions_the_code_calls(pg_template: str) -> None:
    name = f"wakeful_t_{uuid.uuid4().hex[:12]}"
    store = Store.connect(create_pg_database(name))
    try:
        migrate.upgrade(store.engine, "0010")
        with store.engine.connect() as conn:
            assert not conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'wakeful_plan_%'")).scalar()
        migrate.upgrade(store.engine)  # Alembic alone, not Store.migrate's restore
        with store.engine.connect() as conn:
            names = conn.execute(text("SELECT proname FROM pg_proc WHERE proname LIKE 'wakeful_plan_%'")).scalars()
            assert sorted(names) == sorted(plan.name for plan in plans.registered())
        migrate.command.downgrade(migrate.config(store.engine), "0010")
        with store.engine.connect() as conn:
            assert not conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'wakeful_plan_%'")).scalar()
    finally:
        store.dispose()
        drop_pg_database(name)
