"""Malformed messages on every queue, published raw with kombu against the Procfile's
worker and control processes: each one is dropped and recorded, no process exits, and the
next good event is processed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

pytestmark = pytest.mark.processes

# queue -> a task that lives on it (the name a forged message claims)
QUEUE_TASKS = {
    "wakeful.runs": "wakeful.run_inbox",
    "celery": "wakeful.ingest",
    "wakeful.control": "wakeful.scan_timers",
    "wakeful.outbox": "wakeful.dispatch_outbox",
}


def headers(task: Any, **more: Any) -> dict[str, Any]:
    return {"lang": "py", "task": task, "id": str(uuid.uuid4()), **more}


def shapes(task: str) -> list[tuple[str, Any, dict[str, Any] | None, str]]:
    """(what, body, headers, content type): each one a message no worker may die of."""
    json_type = "application/json"
    return [
        ("a JSON string", "notalist", headers(task), json_type),
        ("a list of two", [[], {}], headers(task), json_type),
        ("an object", {"a": 1, "b": 2, "c": 3}, headers(task), json_type),
        ("a number", 5, headers(task), json_type),
        ("null", None, headers(task), json_type),
        ("args not a list", ["x", {}, {}], headers(task), json_type),
        ("kwargs not an object", [[], [], {}], headers(task), json_type),
        ("embed not an object", [[], {}, 7], headers(task), json_type),
        ("a callback", [[], {}, {"callbacks": [{"task": "wakeful.sweep"}]}], headers(task), json_type),
        ("an unexpected argument", [[], {"nope": 1}, {}], headers(task), json_type),
        ("too many positional arguments", [[1, 2, 3, 4, 5, 6, 7, 8], {}, {}], headers(task), json_type),
        ("no task id", [[], {}, {}], {"lang": "py", "task": task}, json_type),
        ("an id with terminal escapes", [[], {}, {}], {**headers(task), "id": "\x1b]0;owned\x07"}, json_type),
        ("a timelimit that is not a pair", [[], {}, {}], headers(task, timelimit="x"), json_type),
        ("an eta a year ahead", [[], {}, {}], headers(task, eta="2099-01-01T00:00:00+00:00"), json_type),
        ("an eta that is not a time", [[], {}, {}], headers(task, eta={"x": 1}), json_type),
        ("an unknown task name", [[], {}, {}], headers("wakeful.nope"), json_type),
        ("an unknown task name without id", [[], {}, {}], {"task": "wakeful.nope"}, json_type),
        ("a task name that is a list", [[], {}, {}], headers(["x"]), json_type),
        ("no headers, a string", "hello", None, json_type),
        ("bytes that are not JSON", b"\xff\xfe{not json", headers(task), json_type),
        ("pickle", b"\x80\x04K\x01.", headers(task), "application/x-python-serialize"),
        ("oversized", [["x" * (1100 * 1024)], {}, {}], headers(task), json_type),
        ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, headers(task), json_type),
        ("an integer of 5,000 digits", b"[[" + b"9" * 5000 + b"], {}, {}]", headers(task), json_type),
    ]


def publish_raw(url: str, queue: str, body: Any, hdrs: dict[str, Any] | None, content_type: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with Connection(url) as conn:
        producer = conn.Producer()
        producer.publish(raw, exchange=Exchange(queue, type="direct"), routing_key=queue,
                         declare=[Queue(queue, Exchange(queue, type="direct"), routing_key=queue)],
                         headers=hdrs or {}, content_type=content_type, content_encoding="binary")


@pytest.mark.parametrize("stack", [
    pytest.param("doors", marks=[pytest.mark.postgres, pytest.mark.redis]),  # PostgreSQL + Redis
    "embedded_doors",  # SQLite + kombu's SQLAlchemy broker: the default
])
def test_every_malformed_message_on_every_queue_is_dropped_recorded_and_survived(
        stack: str, request: pytest.FixtureRequest) -> None:
    doors = request.getfixturevalue(stack)
    expected: dict[str, int] = {}
    for queue, task in QUEUE_TASKS.items():
        cases = shapes(task)
        # ingest takes any arguments and refuses unexpected ones itself (origin
        # task:wakeful.ingest): the guard passes those two on to it
        expected[queue] = len(cases) - (2 if task == "wakeful.ingest" else 0)
        for _what, body, hdrs, content_type in cases:
            publish_raw(doors.broker_url, queue, body, hdrs, content_type)

    def recorded() -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in doors.store.operator.rejections(limit=1000):
            counts[r.origin] = counts.get(r.origin, 0) + 1
        return counts

    expected_origins = {f"queue:{q}": n for q, n in expected.items()} | {"task:wakeful.ingest": 2}
    doors.wait(lambda: recorded() == expected_origins, "every malformed message recorded as rejected input")
    reasons = {r.reason for r in doors.store.operator.rejections(limit=1000)}
    assert any("not Celery's [args, kwargs, embed] triple (got a string)" in r for r in reasons)
    assert any("unknown task name 'wakeful.nope'" in r for r in reasons)
    assert any("limit is 1048576" in r for r in reasons)
    assert sum("cannot be decoded" in r for r in reasons) >= 3 * len(QUEUE_TASKS)

    for proc in doors.procs.procs:
        assert proc.alive(), f"{proc.name} exited\n{doors.logs()}"
    logs = doors.logs(tail=10**7)
    assert "Unrecoverable error" not in logs and "\x1b]0;owned" not in logs

    # The next good event still goes through ingest, the doorbell, a run and the outbox.
    from celery import Celery

    if doors.broker_url.startswith("sqla+"):
        from kombu.transport import sqlalchemy as sqla

        sqla.Transport.polling_interval = 0.05
    client = Celery("outside", broker=doors.broker_url)
    client.conf.update(task_serializer="json", accept_content=["json"])
    client.send_task("wakeful.ingest", kwargs={"inbox": "after", "source": "chat", "source_id": "1",
                                               "payload": {"text": "still there?"}})
    doors.wait(lambda: [e.status for e in doors.store.events("after")] == ["done"],
               "the good event after the flood processed")
    client.close()
