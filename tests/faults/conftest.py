"""Fixtures for the fault scenarios: a fresh PostgreSQL database (the root conftest's
``pg_url``) and a private redis-server per test, so a scenario may flush or restart it."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from databases import service_missing  # tests/databases.py: skip, or fail when required
from harness import PrivateRedis, Stack


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
