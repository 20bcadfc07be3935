"""Broker access is not approval: through the Procfile's processes, a forged ``approval``
event is refused and recorded, and wakeful.answer_approval stores nothing without the
approval's token."""

from __future__ import annotations

import pytest
from hostile_support import APPROVAL_SECRET

from web.tokens import make_token

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
    wrong_key = make_token("ops", "rollback-7", secret="not-the-secret")
    assert "not valid" in call("wakeful.answer_approval", inbox="ops", request_id="rollback-7",
                               answer="yes", token=wrong_key)["rejected"]
    other_request = make_token("ops", "rollback-8", secret=APPROVAL_SECRET)
    assert "not valid" in call("wakeful.answer_approval", inbox="ops", request_id="rollback-7",
                               answer="yes", token=other_request)["rejected"]
    assert store.events("ops") == []  # nothing stood: the human's answer is still open

    token = make_token("ops", "rollback-7", secret=APPROVAL_SECRET)
    assert call("wakeful.answer_approval", inbox="ops", request_id="rollback-7", answer="no",
                token=token) == {"outcome": "no"}
    # a malformed answer is dropped by the worker's guard, and its token is not kept
    spare = make_token("ops", "rollback-7", secret=APPROVAL_SECRET)
    client.send_task("wakeful.answer_approval", args=["ops", "rollback-7", "yes", spare, "extra"])
    doors.wait(lambda: any(r.origin == "queue:celery" for r in store.rejections(limit=100)),
               "the malformed answer refused")

    # nor wipe the history and the record of rejected input through retention
    assert "shorter than WAKEFUL_RETENTION" in call("wakeful.purge", older_than=0)["rejected"]

    origins = [r.origin for r in store.rejections(limit=100)]
    assert origins.count("task:wakeful.ingest") == 2
    assert origins.count("task:wakeful.answer_approval") == 3
    assert origins.count("task:wakeful.purge") == 1
    for t in (token, spare):
        assert all(t not in (r.excerpt or "") + (r.reason or "") for r in store.rejections(limit=100))
    client.close()
