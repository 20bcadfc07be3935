"""The Alembic migrations and the table definitions describe the same schema, on both engines."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from store import Store
from store.db import clock
from store.migrate import config
from store.tables import metadata


def test_migrations_match_the_tables(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_migrations_go_down_and_up_again(store: Store) -> None:
    command.downgrade(config(store.engine), "base")
    assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    store.migrate()
    assert set(metadata.tables) <= set(inspect(store.engine).get_table_names())
    store.migrate()  # idempotent at head


def test_postgres_clock_is_the_real_time_not_the_transaction_start(pg_url: str) -> None:
    """now=None reads clock_timestamp(): a lease judged on now() would freeze inside a transaction."""
    store = Store.connect(pg_url)
    try:
        with store.transactions.transaction() as conn:
            first = clock(conn, None)
            conn.execute(text("SELECT pg_sleep(1.1)"))
            assert clock(conn, None) > first
    finally:
        store.dispose()


def test_events_are_vacuumed_and_analyzed_sooner_than_postgres_default(pg_url: str) -> None:
    store = Store.connect(pg_url)
    try:
        with store.transactions.transaction() as conn:
            options = conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'events'")).scalar()
        assert set(options) == {"autovacuum_vacuum_scale_factor=0.05", "autovacuum_analyze_scale_factor=0.02"}
        command.downgrade(config(store.engine), "0001")
        with store.transactions.transaction() as conn:
            assert conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'events'")).scalar() is None
    finally:
        store.dispose()
