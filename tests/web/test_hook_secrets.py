"""Per-inbox webhook secrets: an inbox with its own is verified by those only; the global
ones apply to the others; changes reach a running app within REFRESH_SECONDS; the secrets
are encrypted in the database and a row moved to another inbox verifies nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio.from_thread
import pytest
from sqlalchemy import select, update

from store import InvalidEvent, Store
from store.hook_secrets import cipher, new_key
from store.tables import hook_secrets
from wakeful.web import create_app
from wakeful.web.hooks import REFRESH_SECONDS
from web_signing import body_of, github_headers, stripe_headers
from web_support import GITHUB_SECRET, STRIPE_SECRET, Client, web_settings

KEY = new_key()


@pytest.fixture
def tenants(web_store: Store) -> Iterator[dict[str, str]]:
    """Two inboxes with GitHub secrets of their own, one without."""
    names = {n: f"{n}-{uuid.uuid4().hex[:8]}" for n in ("a", "b", "c")}
    f = cipher(KEY)
    web_store.hook_secrets.replace(names["a"], "github", ["secret-of-a"], cipher=f)
    web_store.hook_secrets.replace(names["b"], "github", ["secret-of-b-new", "secret-of-b-old"], cipher=f)
    yield names
    for name in names.values():
        web_store.hook_secrets.remove(name)


@pytest.fixture
def hook_client(web_store: Store, clock) -> Iterator[Client]:  # type: ignore[no-untyped-def]
    app = create_app(store=web_store, ring=lambda inbox: None, settings=web_settings(secrets_key=KEY),
                     broker_check=lambda: None, clock=clock)
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        yield c
        portal.call(c.http.aclose)


def post_github(c: Client, inbox: str, secret: str) -> int:
    body = body_of({"n": uuid.uuid4().hex})
    return c.post(f"/hooks/github/{inbox}", content=body, headers=github_headers(secret, body)).status_code


def test_a_delivery_to_b_signed_by_a_is_refused(hook_client: Client, tenants: dict[str, str],
                                                clock) -> None:  # type: ignore[no-untyped-def]
    a, b, c = tenants["a"], tenants["b"], tenants["c"]
    assert post_github(hook_client, b, "secret-of-a") == 401
    assert post_github(hook_client, a, "secret-of-a") == 202
    assert post_github(hook_client, b, "secret-of-b-new") == 202
    assert post_github(hook_client, b, "secret-of-b-old") == 202  # rotation: both verify
    # the global secret applies only to inboxes without their own
    assert post_github(hook_client, a, GITHUB_SECRET) == 401
    assert post_github(hook_client, c, GITHUB_SECRET) == 202
    # an inbox with secrets of its own for GitHub only takes no Stripe delivery at all
    body = body_of({"id": "evt_1"})
    r = hook_client.post(f"/hooks/stripe/{a}", content=body,
                         headers=stripe_headers(STRIPE_SECRET, body, t=int(clock.now)))
    assert (r.status_code, r.json()["error"]) == (403, "no_secret")


def test_a_change_is_in_force_within_the_refresh_interval(hook_client: Client, web_store: Store,
                                                          tenants: dict[str, str], clock) -> None:  # type: ignore[no-untyped-def]
    a = tenants["a"]
    assert post_github(hook_client, a, "secret-of-a") == 202  # the snapshot is read
    web_store.hook_secrets.replace(a, "github", ["rotated-secret-of-a"], cipher=cipher(KEY))
    assert post_github(hook_client, a, "rotated-secret-of-a") == 401  # not yet re-read
    clock.now += REFRESH_SECONDS
    assert post_github(hook_client, a, "rotated-secret-of-a") == 202
    assert post_github(hook_client, a, "secret-of-a") == 401
    web_store.hook_secrets.remove(a)
    clock.now += REFRESH_SECONDS
    assert post_github(hook_client, a, GITHUB_SECRET) == 202  # back to the global secret


def test_secrets_are_encrypted_at_rest_and_bound_to_their_inbox(web_store: Store, tenants: dict[str, str],
                                                               clock) -> None:  # type: ignore[no-untyped-def]
    a, b = tenants["a"], tenants["b"]
    with web_store.engine.connect() as conn:
        sealed = dict(conn.execute(select(hook_secrets.c.inbox, hook_secrets.c.secrets)
                                   .where(hook_secrets.c.inbox.in_([a, b]))).all())
    assert "secret-of-a" not in sealed[a] and "secret-of-b" not in sealed[b]
    assert [(r.kind, r.count) for r in web_store.hook_secrets.rows(cipher=cipher(KEY)) if r.inbox == b] \
        == [("github", 2)]
    # someone with write access copies A's row onto B: B verifies nothing (fails closed)
    with web_store.engine.begin() as conn:
        conn.execute(update(hook_secrets).where(hook_secrets.c.inbox == b).values(secrets=sealed[a]))
    assert web_store.hook_secrets.unsealed(cipher=cipher(KEY))[b] == {"github": ()}
    # a web process with another key: every inbox with secrets of its own fails closed
    app = create_app(store=web_store, ring=lambda inbox: None,
                     settings=web_settings(secrets_key=new_key()), broker_check=lambda: None, clock=clock)
    with anyio.from_thread.start_blocking_portal() as portal:
        c = Client(app, portal)
        assert post_github(c, a, "secret-of-a") == 403
        assert post_github(c, a, GITHUB_SECRET) == 403
        portal.call(c.http.aclose)


def test_bad_secrets_are_refused_before_anything_is_stored(web_store: Store) -> None:
    f = cipher(KEY)
    inbox = f"x-{uuid.uuid4().hex[:8]}"
    for kind, secrets in (("gitlab", ["s"]), ("github", []), ("github", ["1", "2", "3"]),
                          ("github", [" padded "]), ("github", ["tab\tinside"])):
        with pytest.raises(InvalidEvent):
            web_store.hook_secrets.replace(inbox, kind, secrets, cipher=f)
    assert [r for r in web_store.hook_secrets.rows() if r.inbox == inbox] == []


def test_a_refusal_before_the_signature_keeps_no_excerpt(client: Client, web_store: Store, inbox: str) -> None:
    body = b'{"evil": "\x1b]0;owned\x07"}'
    assert client.post(f"/hooks/github/{inbox}", content=body,
                       headers={"content-type": "application/json"}).status_code == 401
    [row] = [r for r in web_store.operator.rejections(limit=500) if r.inbox == inbox]
    assert row.excerpt is None
    # signed but not JSON: the signature vouches for the sender, so an excerpt is kept
    bad = b"{not json"
    assert client.post(f"/hooks/github/{inbox}", content=bad,
                       headers=github_headers(GITHUB_SECRET, bad)).status_code == 422
    signed = [r for r in web_store.operator.rejections(limit=500) if r.inbox == inbox and r.excerpt]
    assert signed and signed[0].excerpt.startswith("{not json")


def test_the_access_log_escapes_what_the_path_carries(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="wakeful.web.access"):
        client.post("/hooks/github/%1B%5D0%3Bowned%07x%E2%80%AE", content=b"{}",
                    headers={"content-type": "application/json"})
    [line] = [r.getMessage() for r in caplog.records if r.name == "wakeful.web.access"]
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line
    assert "\\x1b]0;owned\\x07x\\u202e" in line
