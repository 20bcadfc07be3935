"""Real databases for tests, and the rule for a service that is not there.

Imported by the conftest files and by tests that start their own processes: a plain module
(not a conftest) so every test directory can import it by one name.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

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


REDIS_HOST = os.environ.get("WAKEFUL_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("WAKEFUL_TEST_REDIS_PORT", "6379"))


@contextmanager
def reserved_redis_db(wait_s: float = 300) -> Iterator[int]:
    """A Redis database number (1-15) of the shared server for one test, flushed before and
    after. Reservations are keys in db 0, so parallel test processes never share a number."""
    import redis

    admin = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=0, socket_timeout=3)
    try:
        admin.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        service_missing("Redis", exc)
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for number in range(1, 16):
            if admin.set(f"wakeful-test:db:{number}", token, nx=True, ex=900):
                db = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=number)
                db.flushdb()
                try:
                    yield number
                finally:
                    db.flushdb()
                    if admin.get(f"wakeful-test:db:{number}") == token.encode():
                        admin.delete(f"wakeful-test:db:{number}")
                return
        time.sleep(0.5)
    pytest.fail("no free Redis database number for this test")
