"""Issue 23 against the real `wakeful proxy` process: compressed and re-encoded secrets (item
5), method and URL override headers (item 6), slow clients (item 9), made-up route names
(item 10)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from proxy_support import ENCODINGS, WAKEFUL, Stack, proxy_env, wait_healthy
from slow_clients import half_sent, half_sent_after_a_request, still_open

from wakeful.cli.processes import Processes, free_port, wait_for
from wakeful.proxy.scrub import REDACTED

pytestmark = [pytest.mark.postgres, pytest.mark.processes]


def _readable(body: bytes) -> bytes:
    """What a caller can get out of a body: itself, or what it gunzips to."""
    try:
        return gzip.decompress(body)
    except (OSError, EOFError):
        return body


def test_a_content_encoding_the_proxy_cannot_decode_is_refused_and_recorded(stack: Stack) -> None:
    grant = stack.grant("px-enc", ["shop"])
    got = {}
    for path in ("/br", "/xgzip"):
        response = stack.get("/shop" + path, grant)
        got[path] = (response.status_code, response.headers.get("x-wakeful-refused"),
                     stack.shop_secret.encode() in _readable(response.content))
    assert got == {"/br": (502, "upstream_encoding", False), "/xgzip": (502, "upstream_encoding", False)}
    assert [(e.path, e.status, e.outcome) for e in stack.store.grants.audit("px-enc")] == [
        ("/br", 502, "upstream_encoding"), ("/xgzip", 502, "upstream_encoding")]


def test_a_re_encoded_secret_comes_back_scrubbed(stack: Stack) -> None:
    grant = stack.grant("px-forms", ["shop"])
    leaked = {}
    for form, encode in ENCODINGS.items():
        response = stack.get(f"/shop/encoded/{form}", grant)
        assert response.status_code == 200, (form, response.text)
        if encode(stack.shop_secret) in response.text or REDACTED.decode() not in response.text:
            leaked[form] = response.text[:120]
    assert leaked == {}


OVERRIDES = {"X-HTTP-Method-Override": "DELETE", "X-HTTP-Method": "DELETE", "X-Method-Override": "DELETE",
             "X-Original-URL": "/admin/delete-all", "X-Rewrite-URL": "/admin/delete-all",
             "X-Forwarded-Prefix": "/admin", "X-Forwarded-Path": "/admin", "X-Real-Host": "evil.example",
             "X-Shop-Admin": "true"}
PASSED = {"Accept": "application/json", "Accept-Language": "en", "Content-Type": "application/json",
          "User-Agent": "wakeful-test", "Idempotency-Key": "key-1", "anthropic-version": "2023-06-01",
          "anthropic-beta": "tools-2024"}


def test_only_allowlisted_headers_reach_the_upstream(stack: Stack) -> None:
    grant = stack.grant("px-headers", ["shop"])
    response = stack.get("/shop/orders/7", grant, headers={**OVERRIDES, **PASSED})
    assert response.status_code == 200
    seen = stack.upstream.requests[-1]
    assert (seen.method, seen.path) == ("GET", "/shop/orders/7")
    assert {k: v for k, v in seen.headers.items() if k in {h.lower() for h in OVERRIDES}} == {}
    assert {k: seen.headers.get(k.lower()) for k in PASSED} == PASSED
    # what the proxy sets itself, and what HTTP needs: nothing else
    assert set(seen.headers) <= {h.lower() for h in PASSED} | {"host", "authorization", "accept-encoding",
                                                             "connection", "content-length"}


def test_requests_whose_headers_never_finish_are_dropped(stack: Stack) -> None:
    """300 half-sent requests and a keep-alive connection that stops halfway through its second
    request are closed once WAKEFUL_PROXY_HEADER_TIMEOUT (1 s here) passes; /healthz answers."""
    socks = half_sent(stack.proxy_url, 300) + [half_sent_after_a_request(stack.proxy_url)]
    assert httpx.get(stack.proxy_url + "/healthz", timeout=30).status_code == 200
    left = still_open(socks)
    assert left == 0, f"{left} of {len(socks)} half-sent requests still open after 60 s"


@pytest.fixture
def tight(stack: Stack, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A second proxy on the same database and routes, writing at most 1 refusal a second."""
    url = f"http://127.0.0.1:{free_port()}"
    env = proxy_env(tmp_path, stack.database_url, stack.home / "agent.toml", url,
                    WAKEFUL_PROXY_REFUSALS_PER_SECOND="1")
    procs = Processes(env, tmp_path / "logs")
    proc = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
        "WAKEFUL_TEST_SHOP_TOKEN": stack.shop_secret, "WAKEFUL_TEST_ANTHROPIC_KEY": stack.anthropic_secret})
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        procs.stop_all()


def test_made_up_routes_are_recorded_under_one_label_and_within_a_budget(stack: Stack, tight: str) -> None:
    newest = max([e.id for e in stack.store.grants.audit(limit=1)], default=0)
    started = time.monotonic()
    for n in range(30):
        response = httpx.get(f"{tight}/made-up-{n}/x", timeout=30)
        assert response.status_code in (401, 404), response.text
    elapsed = time.monotonic() - started
    rows = [e for e in stack.store.grants.audit(limit=1000) if e.id > newest]
    assert {e.route for e in rows} == {"(unknown)"}, sorted({e.route for e in rows})
    assert not [r for r in stack.store.operator.metrics()["proxy_not_ok"] if r.startswith("made-up")]
    # the budget: 2 at once, then 1 a second; the rest answered and counted, not written
    unrecorded = httpx.get(tight + "/healthz", timeout=30).json()["refusals_unrecorded"]
    assert len(rows) + unrecorded == 30 and len(rows) <= 3 + elapsed, (len(rows), unrecorded, elapsed)
    # a caller with a live grant is always recorded: that is the evidence worth keeping
    grant = stack.grant("px-budget", ["shop"])
    for _ in range(10):
        assert httpx.get(f"{tight}/shop/admin", headers={"X-Wakeful-Grant": grant}, timeout=30).status_code == 403
    assert [e.outcome for e in stack.store.grants.audit("px-budget")] == ["path_not_allowed"] * 10


def test_a_caller_beyond_the_upstream_connections_waits_its_turn(stack: Stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One upstream connection (WAKEFUL_PROXY_UPSTREAM_CONNECTIONS=1), a connect timeout of
    0.5 s and an answer that takes 2 s: the second caller waits for the connection past the
    connect timeout and gets its answer, not a 504 (the proxy's client once gave up a wait
    for a free connection at the connect timeout)."""
    url = f"http://127.0.0.1:{free_port()}"
    env = proxy_env(tmp_path, stack.database_url, stack.home / "agent.toml", url,
                    WAKEFUL_PROXY_UPSTREAM_CONNECTIONS="1", WAKEFUL_PROXY_CONNECT_TIMEOUT="0.5",
                    WAKEFUL_PROXY_READ_TIMEOUT="30")
    procs = Processes(env, tmp_path / "logs")
    proc = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
        "WAKEFUL_TEST_SHOP_TOKEN": stack.shop_secret, "WAKEFUL_TEST_ANTHROPIC_KEY": stack.anthropic_secret})
    slow_before, stack.upstream.slow_seconds = stack.upstream.slow_seconds, 2.0
    try:
        wait_healthy(url, proc)
        grant = stack.grant("px-queue", ["shop"])
        statuses: list[int] = []

        def call() -> None:
            statuses.append(httpx.get(f"{url}/shop/slow", headers={"X-Wakeful-Grant": grant}, timeout=60).status_code)

        seen = len(stack.upstream.requests)
        first = threading.Thread(target=call)
        first.start()
        wait_for(lambda: len(stack.upstream.requests) > seen, 30, "the first call at the upstream")
        call()  # sent while the first holds the only connection for 2 s
        first.join(60)
        assert statuses == [200, 200]
        assert [e.outcome for e in stack.store.grants.audit("px-queue")] == ["ok", "ok"]
    finally:
        stack.upstream.slow_seconds = slow_before
        procs.stop_all()
