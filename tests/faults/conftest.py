"""Fixtures for the fault scenarios: a fresh PostgreSQL database (the root conftest's
``pg_url``) and a private redis-server per test, so a scenario may flush or restart it."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import PrivateRedis, Stack


def _root_conftest():  # type: ignore[no-untyped-def]
    """tests/conftest.py as a module (every conftest here is named ``conftest``, so it
    cannot be imported by name); loading it again defines nothing pytest sees."""
    import importlib.util
    import sys

    name = "wakeful_tests_root_conftest"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "conftest.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def service_missing(what: str, why: object) -> None:
    _root_conftest().service_missing(what, why)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path / "redis")
    try:
        redis.start()
    except Exception as exc:  # noqa: BLE001 - no redis-server binary, or it did not come up
        service_missing("Redis (redis-server)", exc)
    yield redis
    redis.stop()


@pytest.fixture
def make_stack(pg_url: str, private_redis: PrivateRedis, tmp_path: Path
               ) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def make(**env: str) -> Stack:
        stack = Stack(tmp_path / f"home{len(made)}", pg_url, private_redis.url, overrides=env)
        made.append(stack)
        return stack

    make.stacks = made  # type: ignore[attr-defined]
    yield make
    for stack in made:
        if stack.crashes:
            print("processes that died on their own and were restarted:", stack.crashes)
        stack.close()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    return random.Random(request.node.name)
