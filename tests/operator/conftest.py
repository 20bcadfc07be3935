"""A store with known content, and the ``wakeful`` command run against it.

The commands run in this process through typer's ``CliRunner`` with
``WAKEFUL_DATABASE_URL`` pointing at the test's database (SQLite and PostgreSQL, from the
``db_url`` fixture): each command opens the store from the environment, exactly as the
installed ``wakeful`` does. The doorbell is recorded instead of sent (it is the broker, not
the database); ``test_operator_doorbell.py`` checks a real ring reaches Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from typer.testing import CliRunner, Result

from store import ApprovalRequest, Message, Outcome, Store, Timer

from operator_support import Content


@pytest.fixture
def rings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    rung: list[str] = []
    monkeypatch.setattr("wakeful.cli.operator.ring", rung.append)
    return rung


@pytest.fixture
def wakeful(db_url: str, rings: list[str]) -> Callable[..., Result]:
    from wakeful.cli.main import cli

    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args), env={"WAKEFUL_DATABASE_URL": db_url},
                             catch_exceptions=False)

    return run


@pytest.fixture
def content(make_store: Callable[..., Store]) -> Content:
    """alice: two events done (a message held, a recurring timer, an approval pending) and a
    poison event dead; bob: one pending event under a live lease held by worker-7, and an
    approval that expired unanswered; one rejected input."""
    store = make_store(max_attempts=1)
    now = int(time.time())
    for source_id in ("m-1", "m-2", "p-1"):
        assert store.ingest("alice", "chat", source_id, {"text": source_id}, now=now - 300)
    gen = store.acquire("alice", "worker-1", now=now - 200)
    first, second, poison = store.claim("alice", "worker-1", gen, now=now - 200)
    outcome = Outcome(messages=[Message("hello alice")],
                      timers=[Timer("tick", {"kind": "tick"}, after=600, every=3600)],
                      approvals=[ApprovalRequest("refund-1", "refund order 1", 3600)])
    assert store.finish("alice", "worker-1", gen, [first.id, second.id], outcome, now=now - 190)
    assert store.finish("alice", "worker-1", gen, [poison.id], error="ValueError: poison",
                        now=now - 180)
    assert store.release("alice", "worker-1", gen, now=now - 180)

    store.request_approval("bob", "refund-2", "refund order 2", 10, now=now - 100)
    store.run_scheduler(now=now - 50)  # the expiry fires: an "expired" answer event
    assert store.ingest("bob", "chat", "b-1", {"text": "hi"}, now=now - 40)
    assert store.acquire("bob", "worker-7", now=now) is not None
    store.operator.record_rejection("task:wakeful.ingest", "payload must be a JSON object",
                                    inbox="carol", source="chat", source_id="c-1", excerpt='"oops"')
    [dead] = store.dead()
    assert dead.id == poison.id
    bob_event = [e for e in store.events("bob") if e.source == "chat"][0]
    return Content(now, poison.id, [first.id, second.id], bob_event.id)
