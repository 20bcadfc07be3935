"""Approval answers against a real store: only a token for that approval may answer, the
outcome that stands is returned, a late yes is "expired", opening the link changes nothing."""

from __future__ import annotations

import time
import uuid

import pytest

from web_support import APPROVAL_SECRET, Client
from store import Store
from wakeful.approval_tokens import approval_link, make_token


@pytest.fixture
def request_id(web_store: Store, inbox: str) -> str:
    rid = f"deploy-{uuid.uuid4().hex[:8]}"
    web_store.request_approval(inbox, rid, "deploy v2 to production", 3600)
    return rid


def token_for(inbox: str, rid: str, clock, expires_in: int = 600) -> str:  # type: ignore[no-untyped-def]
    return make_token(inbox, rid, expires_in=expires_in, secret=APPROVAL_SECRET, now=int(clock.now))


def answer(client: Client, inbox: str, rid: str, **fields: str):  # type: ignore[no-untyped-def]
    return client.post(f"/approvals/{inbox}/{rid}", json=fields)


def test_yes_stands_and_wakes_the_inbox(client: Client, web_store: Store, inbox: str, request_id: str,
                                        rung: list[str], clock) -> None:  # type: ignore[no-untyped-def]
    token = token_for(inbox, request_id, clock)
    r = answer(client, inbox, request_id, answer="yes", token=token)
    assert r.status_code == 200, r.text
    assert r.json() == {"inbox": inbox, "request_id": request_id, "answer": "yes", "outcome": "yes"}
    assert rung == [inbox]
    [event] = web_store.events(inbox)
    assert (event.source, event.source_id) == ("approval", request_id)
    assert event.payload["answer"] == "yes"
    # a second, different answer does not change what stands
    r = answer(client, inbox, request_id, answer="no", token=token)
    assert r.json()["outcome"] == "yes"
    assert len(web_store.events(inbox)) == 1


def test_form_post_from_the_page(client: Client, web_store: Store, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    token = token_for(inbox, request_id, clock)
    page = client.get(f"/approvals/{inbox}/{request_id}", params={"token": token})
    assert page.status_code == 200 and 'value="yes"' in page.text and request_id in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert web_store.events(inbox) == []  # opening the link answers nothing
    r = client.post(f"/approvals/{inbox}/{request_id}", data={"answer": "no", "token": token},
                    headers={"accept": "text/html"})
    assert r.status_code == 200 and "Recorded: <b>no</b>" in r.text
    assert web_store.events(inbox)[0].payload["answer"] == "no"


def test_token_in_query_or_bearer(client: Client, web_store: Store, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    token = token_for(inbox, request_id, clock)
    r = client.post(f"/approvals/{inbox}/{request_id}", json={"answer": "yes"},
                    headers={"authorization": f"Bearer {token}"})
    assert r.json()["outcome"] == "yes"
    r = client.post(f"/approvals/{inbox}/{request_id}?token={token}", data={"answer": "yes"})
    assert r.json()["outcome"] == "yes"


def test_approval_link_works_end_to_end(client: Client, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    link = approval_link(inbox, request_id, base_url="http://web.test", expires_in=60, secret=APPROVAL_SECRET,
                         now=int(clock.now))
    assert client.get(link).status_code == 200
    r = client.post(link, data={"answer": "yes"})
    assert r.json()["outcome"] == "yes"


def refused(client: Client, web_store: Store, inbox: str, rid: str, status: int, code: str, **fields: str) -> None:
    r = answer(client, inbox, rid, **fields)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code
    assert web_store.events(inbox) == []
    rejection = web_store.operator.rejections(limit=1)[0]
    assert (rejection.origin, rejection.inbox, rejection.source_id) == ("web:approvals", inbox, rid)
    assert rejection.reason.startswith(f"{status} {code}")
    assert rejection.excerpt is None  # the body carries the token: never recorded
    token = fields.get("token")
    if token:
        assert token not in rejection.reason


def test_who_may_answer(client: Client, web_store: Store, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    refused(client, web_store, inbox, request_id, 401, "no_token", answer="yes")
    refused(client, web_store, inbox, request_id, 403, "bad_token", answer="yes", token="123.abc")
    other = token_for(inbox, request_id + "-other", clock)
    refused(client, web_store, inbox, request_id, 403, "bad_token", answer="yes", token=other)
    other_inbox = token_for(inbox + "x", request_id, clock)
    refused(client, web_store, inbox, request_id, 403, "bad_token", answer="yes", token=other_inbox)
    expired = make_token(inbox, request_id, expires_in=60, secret=APPROVAL_SECRET, now=int(clock.now) - 61)
    refused(client, web_store, inbox, request_id, 403, "expired_token", answer="yes", token=expired)
    forged = make_token(inbox, request_id, expires_in=60, secret="not our key", now=int(clock.now))
    refused(client, web_store, inbox, request_id, 403, "bad_token", answer="yes", token=forged)
    good = token_for(inbox, request_id, clock)
    refused(client, web_store, inbox, request_id, 422, "bad_answer", answer="maybe", token=good)
    refused(client, web_store, inbox, request_id, 422, "bad_answer", token=good)
    # a GET with a bad token is refused too (and changes nothing either way)
    assert client.get(f"/approvals/{inbox}/{request_id}", params={"token": other}).status_code == 403
    assert client.get(f"/approvals/{inbox}/{request_id}").status_code == 401


def test_wrong_content_type_and_oversized(client: Client, web_store: Store, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    token = token_for(inbox, request_id, clock)
    r = client.post(f"/approvals/{inbox}/{request_id}", content=b"answer=yes", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    r = client.post(f"/approvals/{inbox}/{request_id}", data={"answer": "yes", "token": token, "pad": "x" * 5000})
    assert r.status_code == 413
    assert web_store.events(inbox) == []


def test_late_yes_is_expired(client: Client, web_store: Store, inbox: str, rung: list[str], clock) -> None:  # type: ignore[no-untyped-def]
    rid = "late-one"
    web_store.request_approval(inbox, rid, "wire money", 10, now=int(time.time()) - 100)  # deadline passed
    r = answer(client, inbox, rid, answer="yes", token=token_for(inbox, rid, clock))
    assert r.status_code == 200 and r.json()["outcome"] == "expired"
    [event] = web_store.events(inbox)
    assert event.payload["answer"] == "expired"
    assert rung == [inbox]  # the expiry is an event: the agent resumes with it


def test_unknown_approval_is_404(client: Client, web_store: Store, inbox: str, clock) -> None:  # type: ignore[no-untyped-def]
    r = answer(client, inbox, "never-asked", answer="yes", token=token_for(inbox, "never-asked", clock))
    assert r.status_code == 404 and r.json()["outcome"] == "unknown"
    assert web_store.events(inbox) == []


def test_approvals_refused_when_no_secret_is_configured(web_store: Store, inbox: str, request_id: str, clock) -> None:  # type: ignore[no-untyped-def]
    import anyio.from_thread

    from web_support import web_settings
    from wakeful.web.app import create_app

    app = create_app(store=web_store, ring=lambda i: None, settings=web_settings(approval_secrets=()), clock=clock)
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        r = c.post(f"/approvals/{inbox}/{request_id}", json={"answer": "yes", "token": token_for(inbox, request_id, clock)})
        portal.call(c.http.aclose)
    assert r.status_code == 403
    assert web_store.events(inbox) == []


def test_ids_with_slashes_and_spaces(client: Client, web_store: Store, clock) -> None:  # type: ignore[no-untyped-def]
    inbox, rid = f"slack/{uuid.uuid4().hex[:6]}", "deploy/42 now"
    web_store.request_approval(inbox, rid, "deploy", 600)
    link = approval_link(inbox, rid, base_url="http://web.test", expires_in=60, secret=APPROVAL_SECRET,
                         now=int(clock.now))
    assert "/approvals/slack%2F" in link and "/deploy%2F42%20now?" in link
    assert client.get(link).status_code == 200
    assert client.post(link, data={"answer": "no"}).json()["outcome"] == "no"
    assert web_store.events(inbox)[0].source_id == rid


@pytest.mark.parametrize("path", ["/approvals/only-one", "/approvals/a/b/c", "/approvals//b", "/approvals/a/"])
def test_malformed_approval_paths(client: Client, path: str) -> None:
    r = client.post(path, json={"answer": "yes", "token": "1.x"})
    assert r.status_code == 404 and r.json()["error"] == "bad_path"
