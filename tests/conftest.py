"""Shared fixtures: a real SQLite file and a real PostgreSQL database per test.

PostgreSQL tests clone a migrated template database (``CREATE DATABASE ... TEMPLATE``, about
30 ms here) so every test starts from an empty, fully migrated schema without paying for the
migrations again. SQLite tests copy a migrated template file.

Services: a test that needs PostgreSQL or Redis skips when it is unreachable, except when
``WAKEFUL_REQUIRE_SERVICES=1`` (CI sets it): then the skip becomes a failure.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator

import pytest
from databases import create_pg_database, drop_pg_database, service_missing

from store import Store

@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database to clone, one per test process (xdist-safe)."""
    name = f"wakeful_tpl_{uuid.uuid4().hex[:10]}"
    try:
        url = create_pg_database(name)
    except Exception as exc:  # noqa: BLE001 - any connection failure means "not reachable"
        service_missing("PostgreSQL", exc)
    template = Store.connect(url)
    template.migrate()
    template.dispose()
    yield name
    drop_pg_database(name)


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    name = f"wakeful_t_{uuid.uuid4().hex[:12]}"
    url = create_pg_database(name, template=pg_template)
    yield url
    drop_pg_database(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("template") / "template.db"
    template = Store.connect(f"sqlite:///{path}")
    template.migrate()
    template.dispose()
    return str(path)


@pytest.fixture
def sqlite_url(sqlite_template: str, tmp_path) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "store.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs twice: on SQLite and on PostgreSQL."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def make_store(db_url: str) -> Iterator[Callable[..., Store]]:
    """``make_store(**settings)``: a Store on this test's database with those settings."""
    opened: list[Store] = []

    def make(**settings: object) -> Store:
        store = Store.connect(db_url, **settings)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.dispose()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()
