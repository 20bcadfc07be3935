"""Real databases for tests, and the rule for a service that is not there.

Imported by the conftest files and by tests that start their own processes: a plain module
(not a conftest) so every test directory can import it by one name.
"""

from __future__ import annotations

import os

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REQUIRE_SERVICES = os.environ.get("WAKEFUL_REQUIRE_SERVICES") == "1"
PG_ADMIN_URL = os.environ.get("WAKEFUL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("WAKEFUL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def service_missing(what: str, why: object) -> None:
    """Skip on a laptop without the service; fail in CI, where a skip would hide a gap."""
    message = f"{what} is not reachable ({why})"
    if REQUIRE_SERVICES:
        pytest.fail(message + " and WAKEFUL_REQUIRE_SERVICES=1", pytrace=False)
    pytest.skip(message)


def _admin():  # type: ignore[no-untyped-def]
    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_size=1)


def pg_database_url(name: str) -> str:
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def create_pg_database(name: str, template: str | None = None) -> str:
    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            suffix = f' TEMPLATE "{template}"' if template else ""
            conn.execute(text(f'CREATE DATABASE "{name}"{suffix}'))
    finally:
        admin.dispose()
    return pg_database_url(name)


def drop_pg_database(name: str) -> None:
    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
