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


# The reservation of database number N: a key in db 0 holding its owner's token.
RESERVATION_KEY = "wakeful-test:db:{}"


@contextmanager
def redis_reservation(base_url: str, wait_s: float) -> Iterator[int]:
    """A database number (1-15) of the Redis server at ``base_url`` (no db number), flushed
    before and after, for as long as the block runs. Reservations are keys in db 0 (15
    minutes, ``RESERVATION_KEY``), so test processes and benches sharing the server never
    flush each other's queues. RuntimeError when none frees up within ``wait_s``."""
    import redis

    admin = redis.Redis.from_url(base_url + "/0", socket_timeout=3)
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for number in range(1, 16):
            key = RESERVATION_KEY.format(number)
            if admin.set(key, token, nx=True, ex=900):
                db = redis.Redis.from_url(f"{base_url}/{number}")
                db.flushdb()
                try:
                    yield number
                finally:
                    db.flushdb()
                    if admin.get(key) == token.encode():
                        admin.delete(key)
                return
        time.sleep(0.5)
    raise RuntimeError("no free Redis database number (1-15) to reserve")


@contextmanager
def reserved_redis_db(wait_s: float = 300) -> Iterator[int]:
    """A Redis database number (1-15) of the shared server for one test (``redis_reservation``)."""
    import redis

    try:
        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=0, socket_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        service_missing("Redis", exc)
    try:
        with redis_reservation(f"redis://{REDIS_HOST}:{REDIS_PORT}", wait_s) as number:
            yield number
    except RuntimeError as exc:
        if "no free Redis database" not in str(exc):
            raise
        pytest.fail("no free Redis database number for this test")


RABBITMQ_URL = os.environ.get("WAKEFUL_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672")


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A fresh RabbitMQ virtual host for one test (``rabbitmqctl``, as the server's admin),
    deleted after it: an AMQP broker URL whose queues no other test shares."""
    import shutil
    import socket
    import subprocess

    url = make_url(RABBITMQ_URL.replace("amqp://", "amqp+x://", 1))
    try:
        socket.create_connection((url.host or "127.0.0.1", url.port or 5672), timeout=3).close()
    except OSError as exc:
        service_missing("RabbitMQ", exc)
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        service_missing("RabbitMQ's rabbitmqctl", "not on PATH")
    vhost = f"wakeful_t_{uuid.uuid4().hex[:10]}"

    def admin(*args: str) -> None:
        subprocess.run([ctl, "-q", *args], check=True, capture_output=True, timeout=60)

    admin("add_vhost", vhost)
    try:
        admin("set_permissions", "-p", vhost, url.username or "guest", ".*", ".*", ".*")
        yield f"{RABBITMQ_URL}/{vhost}"
    finally:
        admin("delete_vhost", vhost)
