"""The receivers against a real store (SQLite and PostgreSQL): signature first, one ingest,
the doorbell, 2xx; duplicates 2xx and stored once; every refusal recorded, nothing stored."""

from __future__ import annotations

import json
import uuid

import pytest

from web_support import GITHUB_SECRET, STRIPE_SECRET, WEBHOOK_SECRET, Client, web_settings
from store import Store
from wakeful.web.app import create_app
from web_signing import body_of, github_headers, standard_headers, stripe_headers


def events(store: Store, inbox: str):  # type: ignore[no-untyped-def]
    return store.events(inbox)


def last_rejection(store: Store):  # type: ignore[no-untyped-def]
    return store.operator.rejections(limit=1)[0]


# --- accepted deliveries ----------------------------------------------------------------

def test_github_delivery_stored_rung_and_deduplicated(client: Client, web_store: Store, inbox: str,
                                                       rung: list[str]) -> None:
    body = body_of({"ref": "refs/heads/main", "commits": [{"id": "abc"}]})
    headers = github_headers(GITHUB_SECRET, body, event="push")
    first = client.post(f"/hooks/github/{inbox}", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert first.json() == {"inbox": inbox, "source": "github",
                            "source_id": headers["x-github-delivery"], "duplicate": False}
    assert rung == [inbox]
    [event] = events(web_store, inbox)
    assert (event.source, event.source_id) == ("github", headers["x-github-delivery"])
    assert event.payload == {"type": "push", "body": json.loads(body)}

    again = client.post(f"/hooks/github/{inbox}", content=body, headers=headers)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert len(events(web_store, inbox)) == 1
    assert rung == [inbox]  # a duplicate wakes nobody: the first ring (or the sweep) covers it


def test_stripe_delivery(client: Client, web_store: Store, inbox: str, clock) -> None:  # type: ignore[no-untyped-def]
    body = body_of({"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy", "type": "invoice.paid", "data": {"object": {}}})
    r = client.post(f"/hooks/stripe/{inbox}", content=body,
                    headers=stripe_headers(STRIPE_SECRET, body, t=int(clock.now)))
    assert r.status_code == 202, r.text
    [event] = events(web_store, inbox)
    assert (event.source, event.source_id) == ("stripe", "evt_1NG8Du2eZvKYlo2CUI79vXWy")
    assert event.payload["type"] == "invoice.paid"
    # Stripe retries with a new timestamp and signature: still the same event
    r = client.post(f"/hooks/stripe/{inbox}", content=body,
                    headers=stripe_headers(STRIPE_SECRET, body, t=int(clock.now) + 60))
    assert r.status_code == 200 and r.json()["duplicate"] is True
    assert len(events(web_store, inbox)) == 1


def test_standard_delivery(client: Client, web_store: Store, inbox: str, clock) -> None:  # type: ignore[no-untyped-def]
    body = body_of({"type": "user.created", "data": {"id": 7}})
    headers = standard_headers(WEBHOOK_SECRET, body, msg_id="msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", t=int(clock.now))
    r = client.post(f"/hooks/standard/{inbox}", content=body, headers=headers)
    assert r.status_code == 202, r.text
    [event] = events(web_store, inbox)
    assert (event.source, event.source_id) == ("standard", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
    assert event.payload == {"type": "user.created", "body": {"type": "user.created", "data": {"id": 7}}}


def test_rotated_secrets_over_http(web_store: Store, rung: list[str], clock, inbox: str) -> None:  # type: ignore[no-untyped-def]
    import anyio.from_thread

    settings = web_settings(github_secrets=("gh-new", GITHUB_SECRET), stripe_secrets=("whsec_new", STRIPE_SECRET))
    app = create_app(store=web_store, ring=rung.append, settings=settings, clock=clock)
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(app, portal)
        for secret in ("gh-new", GITHUB_SECRET):
            body = body_of({"n": secret})
            assert client.post(f"/hooks/github/{inbox}", content=body,
                               headers=github_headers(secret, body)).status_code == 202
        for secret in ("whsec_new", STRIPE_SECRET):
            body = body_of({"id": f"evt_{secret}"})
            assert client.post(f"/hooks/stripe/{inbox}", content=body,
                               headers=stripe_headers(secret, body, t=int(clock.now))).status_code == 202
        body = body_of({"n": 1})
        assert client.post(f"/hooks/github/{inbox}", content=body,
                           headers=github_headers("retired", body)).status_code == 401
        portal.call(client.http.aclose)
    assert len(events(web_store, inbox)) == 4


def test_doorbell_failure_still_answers_2xx(web_store: Store, settings, clock, inbox: str) -> None:  # type: ignore[no-untyped-def]
    import anyio.from_thread

    def broken_ring(inbox: str) -> None:
        raise ConnectionError("broker down")

    app = create_app(store=web_store, ring=broken_ring, settings=settings, clock=clock)
    body = body_of({"a": 1})
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(app, portal)
        r = client.post(f"/hooks/github/{inbox}", content=body, headers=github_headers(GITHUB_SECRET, body))
        portal.call(client.http.aclose)
    assert r.status_code == 202
    assert len(events(web_store, inbox)) == 1  # stored: the sweep will ring it


# --- refusals: status, record, nothing stored --------------------------------------------

def refuse(client: Client, store: Store, inbox: str, kind: str, body: bytes, headers: dict[str, str],
           status: int, code: str):  # type: ignore[no-untyped-def]
    r = client.post(f"/hooks/{kind}/{inbox}", content=body, headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code
    assert events(store, inbox) == []
    rejection = last_rejection(store)
    assert rejection.origin == f"web:hooks/{kind}"
    assert rejection.reason.startswith(f"{status} {code}")
    assert rejection.inbox == inbox
    for secret in (GITHUB_SECRET, STRIPE_SECRET, WEBHOOK_SECRET):
        assert all(secret not in (v or "") for v in (rejection.reason, rejection.excerpt, rejection.source_id))
    return rejection


def test_github_published_vector_passes_then_422_because_not_json(client: Client, web_store: Store,
                                                                   inbox: str) -> None:
    # The signature is checked on the raw bytes before anything is parsed: GitHub's vector
    # body "Hello, World!" gets past the signature and is then refused as not JSON.
    import anyio.from_thread

    app = create_app(store=web_store, ring=lambda i: None,
                     settings=web_settings(github_secrets=("It's a Secret to Everybody",)))
    headers = {"content-type": "application/json", "x-github-delivery": "d-vector",
               "x-hub-signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        rejection = refuse(c, web_store, inbox, "github", b"Hello, World!", headers, 422, "not_json")
        assert rejection.source_id == "d-vector"
        assert rejection.excerpt == "Hello, World!"
        # one byte off: the signature refuses it first (401, not 422)
        headers["x-hub-signature-256"] = headers["x-hub-signature-256"][:-1] + "0"
        refuse(c, web_store, inbox, "github", b"Hello, World!", headers, 401, "bad_signature")
        portal.call(c.http.aclose)


@pytest.mark.parametrize("kind", ["github", "stripe", "standard"])
def test_unsigned_and_badly_signed(client: Client, web_store: Store, inbox: str, kind: str) -> None:
    body = body_of({"id": "evt_x"})
    refuse(client, web_store, inbox, kind, body, {"content-type": "application/json"}, 401, "no_signature")
    forged = {"github": github_headers("wrong", body), "stripe": stripe_headers("wrong", body),
              "standard": standard_headers("whsec_" + "QUFBQUFBQUFBQUFBQUFBQQ==", body)}[kind]
    refuse(client, web_store, inbox, kind, body, forged, 401, "bad_signature")


@pytest.mark.parametrize("kind", ["github", "stripe", "standard"])
def test_kind_without_a_secret_is_refused(web_store: Store, inbox: str, kind: str) -> None:
    import anyio.from_thread

    app = create_app(store=web_store, ring=lambda i: None,
                     settings=web_settings(github_secrets=(), stripe_secrets=(), webhook_secrets=()))
    body = body_of({"id": "evt_x"})
    headers = {"github": github_headers("", body), "stripe": stripe_headers("", body),
               "standard": standard_headers(WEBHOOK_SECRET, body)}[kind]
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        refuse(c, web_store, inbox, kind, body, headers, 403, "no_secret")
        portal.call(c.http.aclose)


@pytest.mark.parametrize("skew", [-301, 301, -86400])
def test_replays_outside_tolerance_over_http(client: Client, web_store: Store, inbox: str, clock, skew: int) -> None:  # type: ignore[no-untyped-def]
    body = body_of({"id": f"evt_{uuid.uuid4().hex}"})
    t = int(clock.now) + skew
    refuse(client, web_store, inbox, "stripe", body, stripe_headers(STRIPE_SECRET, body, t=t), 401, "stale_timestamp")
    refuse(client, web_store, inbox, "standard", body, standard_headers(WEBHOOK_SECRET, body, t=t),
           401, "stale_timestamp")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", "application/jsonx"])
def test_wrong_content_type(client: Client, web_store: Store, inbox: str, content_type: str | None) -> None:
    body = body_of({"a": 1})
    headers = github_headers(GITHUB_SECRET, body)
    del headers["content-type"]
    if content_type:
        headers["content-type"] = content_type
    refuse(client, web_store, inbox, "github", body, headers, 415, "content_type")


def test_charset_utf8_is_fine(client: Client, web_store: Store, inbox: str) -> None:
    body = body_of({"a": 1})
    headers = github_headers(GITHUB_SECRET, body) | {"content-type": "Application/JSON; charset=UTF-8"}
    assert client.post(f"/hooks/github/{inbox}", content=body, headers=headers).status_code == 202


def test_body_over_the_limit_declared(client: Client, web_store: Store, inbox: str, settings) -> None:  # type: ignore[no-untyped-def]
    body = b'{"a": "' + b"x" * settings.max_body_bytes + b'"}'
    rejection = refuse(client, web_store, inbox, "github", body, github_headers(GITHUB_SECRET, body),
                       413, "too_large")
    assert rejection.excerpt is None or len(rejection.excerpt) <= 200  # never the whole body


def test_body_over_the_limit_streamed_is_cut_short(client: Client, web_store: Store, inbox: str, settings) -> None:  # type: ignore[no-untyped-def]
    sent: list[int] = []

    async def endless():  # type: ignore[no-untyped-def]
        chunk = b"x" * 65536
        for _ in range(10_000):  # 655 MB if it were all read
            sent.append(len(chunk))
            yield chunk

    headers = {"content-type": "application/json", "x-hub-signature-256": "sha256=00"}
    r = client.post(f"/hooks/github/{inbox}", content=endless(), headers=headers)
    assert r.status_code == 413
    assert sum(sent) <= settings.max_body_bytes + 2 * 65536
    assert events(web_store, inbox) == []


@pytest.mark.parametrize("body,code", [
    (b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}", "too_deep"),
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "too_deep"),
    (b'{"a": ' + b"7" * 5000 + b"}", "int_too_long"),
    (b'{"a": "\\u0000"}', "bad_text"),
    (b'{"a": "\\ud800"}', "bad_text"),
    (b'{"a": NaN}', "not_json"),
    (b"[]", "not_object"),
    (b"\xff", "not_json"),
])
def test_signed_but_hazardous_json(client: Client, web_store: Store, inbox: str, body: bytes, code: str) -> None:
    refuse(client, web_store, inbox, "github", body, github_headers(GITHUB_SECRET, body), 422, code)


def test_what_the_store_refuses_is_a_422(client: Client, web_store: Store, clock) -> None:  # type: ignore[no-untyped-def]
    body = body_of({"a": "x" * 300_000})  # under the body limit, over the store's payload cap
    long_inbox = "i" * 200  # over the store's inbox limit
    r = client.post(f"/hooks/github/{long_inbox}", content=body, headers=github_headers(GITHUB_SECRET, body))
    assert r.status_code == 422 and r.json()["error"] == "invalid_event"
    assert last_rejection(web_store).inbox == ("i" * 127 + "…")  # cut to fit, as evidence
    inbox = f"ok-{uuid.uuid4().hex[:8]}"
    refuse(client, web_store, inbox, "github", body, github_headers(GITHUB_SECRET, body), 422, "invalid_event")
    no_id = body_of({"type": "x"})
    refuse(client, web_store, inbox, "stripe", no_id, stripe_headers(STRIPE_SECRET, no_id, t=int(clock.now)),
           422, "invalid_event")
    headers = github_headers(GITHUB_SECRET, no_id)
    del headers["x-github-delivery"]
    refuse(client, web_store, inbox, "github", no_id, headers, 422, "missing_header")


def test_unknown_routes_and_methods(client: Client) -> None:
    assert client.post("/hooks/gitlab/x", content=b"{}").status_code == 404
    assert client.get("/hooks/github/x").status_code == 405


def test_store_down_is_503_not_a_crash(settings, clock, inbox: str) -> None:  # type: ignore[no-untyped-def]
    import anyio.from_thread

    down = Store.connect("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    app = create_app(store=down, ring=lambda i: None, settings=settings, clock=clock)
    body = body_of({"a": 1})
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        r = c.post(f"/hooks/github/{inbox}", content=body, headers=github_headers(GITHUB_SECRET, body))
        assert r.status_code == 503 and r.headers["retry-after"] == "30"
        # Which secrets verify a delivery (the inbox's own or the global ones) is in the store:
        # with the store down and nothing read yet, an unsigned delivery is a 503 as well.
        r = c.post(f"/hooks/github/{inbox}", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 503
        # a refusal that needs no store (a body over the limit) is still a 4xx
        r = c.post(f"/hooks/github/{inbox}", content=b"x" * (settings.max_body_bytes + 1),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413
        portal.call(c.http.aclose)
    down.dispose()


# --- the same delivery 100 times at once ------------------------------------------------

@pytest.mark.parametrize("kind", ["github", "stripe"])
def test_same_delivery_100_times_concurrently(client: Client, web_store: Store, inbox: str, rung: list[str],
                                              clock, kind: str) -> None:  # type: ignore[no-untyped-def]
    body = body_of({"id": "evt_same", "n": 1})
    headers = github_headers(GITHUB_SECRET, body) if kind == "github" else \
        stripe_headers(STRIPE_SECRET, body, t=int(clock.now))
    responses = client.gather([("POST", f"/hooks/{kind}/{inbox}", {"content": body, "headers": headers})] * 100)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 99 + [202], codes
    assert len(events(web_store, inbox)) == 1
    assert rung == [inbox]


def test_inbox_with_a_slash(client: Client, web_store: Store) -> None:
    inbox = f"slack/{uuid.uuid4().hex[:6]}"
    for path in (f"/hooks/github/{inbox}", "/hooks/github/" + inbox.replace("/", "%2F")):
        body = body_of({"path": path})
        r = client.post(path, content=body, headers=github_headers(GITHUB_SECRET, body))
        assert r.status_code == 202 and r.json()["inbox"] == inbox
    assert len(events(web_store, inbox)) == 2
