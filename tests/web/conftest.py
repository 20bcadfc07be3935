"""Fixtures for the web edge: a real store per test module, on SQLite and on PostgreSQL.

Each module gets its own database (``wakeful_web_<random>`` on PostgreSQL, a file on SQLite),
migrated once and dropped afterwards; tests inside a module use their own inbox names, so
they never see each other's rows. PostgreSQL skips when unreachable, unless
``WAKEFUL_REQUIRE_SERVICES=1``: then it fails.

The doorbell is a plain function that records the inboxes it was asked to ring: the store
stays real, only the broker is left out (the uvicorn test uses the runtime's own doorbell).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio.from_thread
import pytest
from databases import create_pg_database, drop_pg_database, service_missing

from store import Store
from wakeful.web.app import create_app
from wakeful.settings import WebSettings
from web_support import Client, web_settings

@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def web_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database for this module: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('web') / 'store.db'}"
        store = Store.connect(url)
        store.migrate()
        store.dispose()
        yield url
        return
    name = f"wakeful_web_{uuid.uuid4().hex[:12]}"
    try:
        url = create_pg_database(name)
    except Exception as exc:  # noqa: BLE001 - any connection failure means "not reachable"
        service_missing("PostgreSQL", exc)
    try:
        store = Store.connect(url)
        store.migrate()
        store.dispose()
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture(scope="module")
def web_store(web_db_url: str) -> Iterator[Store]:
    # A pool big enough for the threadpool's concurrent ingests in the concurrency tests.
    store = Store.connect(web_db_url, pool_size=10)
    yield store
    store.dispose()


@dataclass
class Clock:
    """The app's clock, settable by a test (signature timestamps and tokens are judged by it)."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rung() -> list[str]:
    return []


@pytest.fixture
def settings() -> WebSettings:
    return web_settings()


@pytest.fixture
def app(web_store: Store, rung: list[str], settings: WebSettings, clock: Clock):  # type: ignore[no-untyped-def]
    return create_app(store=web_store, ring=rung.append, settings=settings,
                      broker_check=lambda: None, clock=clock)


@pytest.fixture
def client(app) -> Iterator[Client]:  # type: ignore[no-untyped-def]
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        yield c
        portal.call(c.http.aclose)


@pytest.fixture
def inbox() -> str:
    return f"inbox-{uuid.uuid4().hex[:10]}"
