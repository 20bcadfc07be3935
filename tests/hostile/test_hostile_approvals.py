"""Broker access is not approval: through the Procfile's processes, a forged ``approval``
event is refused and recorded, wakeful.answer_approval stores nothing without the approval's
token, and an answer taken off the queue and changed is refused."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from hostile_support import APPROVAL_SECRET

from wakeful.approval_tokens import answer_token, make_token

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.processes]


def test_anyone_on_the_broker_cannot_approve(doors) -> None:
    store = doors.store
    store.request_approval("ops", "rollback-7", "roll back deploy 7", 3600)
    client = doors.client()

    def call(name: str, **kwargs):  # type: ignore[no-untyped-def]
        return client.send_task(name, kwargs=kwargs, ignore_result=False).get(timeout=60, interval=0.05)

    forged = call("wakeful.ingest", inbox="ops", source="approval", source_id="rollback-7",
                  payload={"approval": "rollback-7", "answer": "yes", "action": "roll back deploy 7"})
    assert forged["stored"] is False and "written by wakeful itself" in forged["rejected"]
    forged_timer = call("wakeful.ingest", inbox="ops", source="timer", source_id="x@1", payload={})
    assert "written by wakeful itself" in forged_timer["rejected"]

    no_token = call("wakeful.answer_approval", inbox="ops", request_id="rollback-7", answer="yes")
    assert no_token["outcome"] is None and "needs the token" in no_token["rejected"]
    wrong_key = make_token("ops", "rollback-7", secret="not-the-secret", expires_in=3600)
    assert "not valid" in call("wakeful.answer_approval", inbox="ops", request_id="rollback-7",
                               answer="yes", token=wrong_key)["rejected"]
    other_request = make_token("ops", "rollback-8", secret=APPROVAL_SECRET, expires_in=3600)
    assert "not valid" in call("wakeful.answer_approval", inbox="ops", request_id="rollback-7",
                               answer="yes", token=other_request)["rejected"]
    assert store.events("ops") == []  # nothing stood: the human's answer is still open

    token = answer_token(make_token("ops", "rollback-7", secret=APPROVAL_SECRET, expires_in=3600), "no")
    assert call("wakeful.answer_approval", inbox="ops", request_id="rollback-7", answer="no",
                token=token) == {"outcome": "no"}
    # a malformed answer is dropped by the worker's guard, and its token is not kept
    spare = make_token("ops", "rollback-7", secret=APPROVAL_SECRET, expires_in=3600)
    client.send_task("wakeful.answer_approval", args=["ops", "rollback-7", "yes", spare, "extra"])
    doors.wait(lambda: any(r.origin == "queue:celery" for r in store.operator.rejections(limit=100)),
               "the malformed answer refused")

    # nor wipe the history and the record of rejected input through retention
    assert "shorter than WAKEFUL_RETENTION" in call("wakeful.purge", older_than=0)["rejected"]

    origins = [r.origin for r in store.operator.rejections(limit=100)]
    assert origins.count("task:wakeful.ingest") == 2
    assert origins.count("task:wakeful.answer_approval") == 3
    assert origins.count("task:wakeful.purge") == 1
    for t in (token, spare):
        assert all(t not in (r.excerpt or "") + (r.reason or "") for r in store.operator.rejections(limit=100))
    client.close()


@pytest.mark.parametrize("carried", ["the link's token", "the answer's token"])
def test_an_answer_taken_off_the_queue_and_changed_is_refused(doors, carried: str) -> None:
    """A bot says no; someone on Redis pops the message (BRPOP, as a worker does), turns the
    answer into yes and pushes it back. With the link's token (what bots sent before the
    answer token) or the answer's own, the changed answer is refused and recorded, and the
    approval stays open; the same bot's untouched no then stands."""
    store = doors.store
    store.request_approval("ops", "deploy-9", "deploy 9", 3600)
    link_token = make_token("ops", "deploy-9", secret=APPROVAL_SECRET, expires_in=3600)
    token = link_token if carried == "the link's token" else answer_token(link_token, "no")
    # The attacker races the control worker for the message; stopping the worker while the
    # message waits makes the race one the attacker always wins.
    [control] = [p for p in doors.procs.procs if p.name == "control"]
    doors.procs.stop(control)
    client = doors.client()
    client.send_task("wakeful.answer_approval",
                     kwargs={"inbox": "ops", "request_id": "deploy-9", "answer": "no", "token": token})
    _flip_on_the_queue(redis.Redis.from_url(doors.broker_url), "celery", "wakeful.answer_approval")
    from wakeful.cli.processes import CONTROL_QUEUES

    doors.procs.wait_ready(doors.procs.worker("control-again", CONTROL_QUEUES, concurrency=2))

    [refusal] = doors.wait(lambda: [r for r in store.operator.rejections(limit=10)
                                    if r.origin == "task:wakeful.answer_approval"], "the changed answer refused")
    print(f"{carried}: refused: {refusal.reason}")
    assert refusal.excerpt == "'yes'" and link_token not in refusal.reason and token not in refusal.reason
    assert store.events("ops") == []
    [approval] = store.approvals.view("ops")  # still pending: nobody has answered
    assert approval.request_id == "deploy-9"

    untouched = answer_token(link_token, "no")
    result = client.send_task("wakeful.answer_approval", ignore_result=False, kwargs={
        "inbox": "ops", "request_id": "deploy-9", "answer": "no", "token": untouched}
    ).get(timeout=60, interval=0.05)
    assert result == {"outcome": "no"}
    assert [e.payload["answer"] for e in store.events("ops")] == ["no"]
    client.close()


def _flip_on_the_queue(broker: redis.Redis, queue: str, task: str) -> None:
    """Take the task's message off the list, turn its answer into yes, push it back (kombu's
    Redis message: a JSON envelope around a base64 body of [args, kwargs, embed])."""
    for _ in range(1000):
        popped = broker.brpop([queue], timeout=30)
        assert popped is not None, f"no {task} message on {queue}"
        envelope = json.loads(popped[1])
        if envelope["headers"].get("task") != task:
            broker.lpush(queue, popped[1])  # someone else's message: back where it was going
            continue
        args, kwargs, embed = json.loads(base64.b64decode(envelope["body"]))
        kwargs["answer"] = "yes"
        envelope["body"] = base64.b64encode(json.dumps([args, kwargs, embed]).encode()).decode()
        broker.lpush(queue, json.dumps(envelope))
        return
    raise AssertionError(f"no {task} message among 1000 on {queue}")
