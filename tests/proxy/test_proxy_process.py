"""The real proxy process (`wakeful proxy`) against a fake upstream on loopback: the secret goes
out, never back; refusals send nothing upstream; streams pass as they arrive; every request
leaves an audit row."""

from __future__ import annotations

import httpx
import pytest
from proxy_support import WAKEFUL, Stack

from wakeful.agent.egress import Egress, EgressError, RouteClient, using, client
from wakeful.proxy.scrub import REDACTED

pytestmark = [pytest.mark.postgres, pytest.mark.processes]


def _outcomes(stack: Stack, inbox: str) -> list[tuple[str, str, int, str]]:
    return [(e.method, e.path, e.status, e.outcome) for e in stack.store.grants.audit(inbox)]


def test_an_allowed_request_carries_the_routes_secret_and_never_brings_it_back(stack: Stack) -> None:
    grant = stack.grant("px-ok", ["shop"])
    with Egress(stack.proxy_url, grant).http("shop") as http:
        response = http.get("/orders/17", params={"q": "1"},
                            headers={"Authorization": "Bearer sk-the-workers-own", "Cookie": "a=b"})
    assert response.status_code == 200
    seen = stack.upstream.requests[-1]
    assert (seen.method, seen.path, seen.query) == ("GET", "/shop/orders/17", "q=1")
    assert seen.headers["authorization"] == f"Bearer {stack.shop_secret}"  # the real key went out
    assert "x-wakeful-grant" not in seen.headers and "cookie" not in seen.headers
    assert seen.headers["accept-encoding"] == "identity"
    # the upstream echoed its headers, body and header: the key is gone from all of it
    assert stack.shop_secret not in response.text and REDACTED.decode() in response.text
    assert response.headers["x-echo-auth"] == f"Bearer {REDACTED.decode()}"
    assert grant not in response.text
    [entry] = stack.store.grants.audit("px-ok")
    assert (entry.route, entry.method, entry.path, entry.status, entry.outcome) == (
        "shop", "GET", "/orders/17", 200, "ok")
    assert entry.bytes == len(response.content) and entry.generation == stack.lease("px-ok")


def test_refusals_say_why_and_send_nothing_upstream(stack: Stack) -> None:
    grant = stack.grant("px-no", ["shop"])
    model_only = stack.store.grants.mint("px-no", "w1", stack.lease("px-no"), ["anthropic"], 600)
    before = len(stack.upstream.requests)
    cases = [
        ("/shop/orders/1", None, "GET", 401, "no_grant"),
        ("/shop/orders/1", "wkg_" + "A" * 43, "GET", 403, "forged"),
        ("/shop/orders/1", model_only, "GET", 403, "route_not_granted"),
        ("/shop/admin", grant, "GET", 403, "path_not_allowed"),
        ("/shop/orders/1", grant, "DELETE", 403, "path_not_allowed"),
        ("/shop/refunds-all", grant, "POST", 403, "path_not_allowed"),
        ("/shop/orders/..%2F..%2Fadmin", grant, "GET", 403, "bad_path"),
        ("/shop/orders/%2e%2e/admin", grant, "GET", 403, "bad_path"),
        ("/shop/orders//x", grant, "GET", 403, "bad_path"),
        ("/bank/anything", grant, "GET", 404, "unknown_route"),
    ]
    for path, token, method, status, outcome in cases:
        response = stack.get(path, token, method)
        assert (response.status_code, response.headers["x-wakeful-refused"]) == (status, outcome), path
        assert response.json()["error"]["message"].startswith("wakeful proxy: ")
    assert len(stack.upstream.requests) == before  # nothing reached the upstream
    refused = [(e.status, e.outcome) for e in stack.store.grants.audit("px-no")]
    assert refused == [(s, o) for _, t, _, s, o in cases if t not in (None, "wkg_" + "A" * 43)]
    by_route = stack.store.operator.metrics()["proxy_not_ok"]
    assert by_route["shop"]["no_grant"] >= 1 and by_route["shop"]["bad_path"] >= 3


def test_an_expired_grant_is_refused(stack: Stack) -> None:
    gen = stack.lease("px-exp")
    past = stack.store.transactions.clock() - 100
    token = stack.store.grants.mint("px-exp", "w1", gen, ["shop"], 10, now=past)
    before = len(stack.upstream.requests)
    response = stack.get("/shop/orders/1", token)
    assert (response.status_code, response.headers["x-wakeful-refused"]) == (403, "expired")
    assert len(stack.upstream.requests) == before


def test_the_tool_client_sends_json_and_the_idempotency_key_and_raises_the_refusal(stack: Stack) -> None:
    class Call:
        idempotency_key = "wakeful-tool-abc"

    grant = stack.grant("px-tool", ["shop"])
    with pytest.raises(EgressError, match="no egress grant"):
        client("shop", Call())
    with using(Egress(stack.proxy_url, grant)):
        shop: RouteClient = client("shop", Call())
        echoed = shop.request("POST", "/refunds", {"order": 7})
        read = shop.request("GET", "/orders/7", {"verbose": True})
        with pytest.raises(EgressError) as refused:
            shop.request("POST", "/orders/7", {})
    assert echoed["body"] == '{"order":7}' and echoed["headers"]["idempotency-key"] == "wakeful-tool-abc"
    assert read["query"] == "verbose=true" and "idempotency-key" not in read["headers"]
    assert refused.value.status == 403 and refused.value.outcome == "path_not_allowed"
    assert "allowlist" in str(refused.value)


def test_server_sent_events_pass_as_they_arrive_with_a_split_secret_scrubbed(stack: Stack) -> None:
    grant = stack.grant("px-sse", ["shop"])
    stack.upstream.gate.clear()
    events: list[str] = []
    with Egress(stack.proxy_url, grant).http("shop") as http:
        with http.stream("GET", "/stream") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                if len(events) == 2:
                    # the upstream holds its last event until this point: it arrives only if
                    # the first two were passed on before the response ended
                    stack.upstream.gate.set()
    assert events == ["first", f"auth Bearer {REDACTED.decode()}", "last"]
    assert stack.store.grants.audit("px-sse")[-1].outcome == "ok"


def test_a_caller_that_leaves_mid_stream_is_recorded(stack: Stack) -> None:
    from wakeful.cli.processes import wait_for

    grant = stack.grant("px-gone", ["shop"])
    stack.upstream.gate.clear()
    with Egress(stack.proxy_url, grant).http("shop") as http:
        with http.stream("GET", "/stream") as response:
            first = next(line for line in response.iter_lines() if line.startswith("data: "))
    assert first == "data: first"  # the client closed the stream here, before the last event
    entry = wait_for(lambda: stack.store.grants.audit("px-gone"), 30, "the audit row")[0]  # type: ignore[index]
    assert (entry.status, entry.outcome) == (200, "client_gone")
    stack.upstream.gate.set()


def test_upstream_down_slow_oversized_and_compressed(stack: Stack) -> None:
    grant = stack.grant("px-bad", ["shop", "down"])
    down = stack.get("/down/", grant)
    assert (down.status_code, down.headers["x-wakeful-refused"]) == (502, "upstream_down")
    slow = stack.get("/shop/slow", grant)  # the proxy's read timeout is 1.5 s here
    assert (slow.status_code, slow.headers["x-wakeful-refused"]) == (504, "upstream_timeout")
    big = stack.get("/shop/big", grant)  # 200,000 bytes upstream; the limit here is 65,536
    assert big.status_code == 200 and len(big.content) == 65536
    zipped = stack.get("/shop/gzip", grant)
    assert "content-encoding" not in zipped.headers
    assert zipped.json() == {"auth": f"Bearer {REDACTED.decode()}"}
    assert _outcomes(stack, "px-bad") == [
        ("GET", "/", 502, "upstream_down"), ("GET", "/slow", 504, "upstream_timeout"),
        ("GET", "/big", 200, "response_cut"), ("GET", "/gzip", 200, "ok")]
    assert stack.store.grants.audit("px-bad")[2].bytes == 65536


def test_the_anthropic_sdk_talks_through_the_proxy_with_a_grant_for_a_key(stack: Stack) -> None:
    grant = stack.grant("px-sdk", ["anthropic"])
    model = Egress(stack.proxy_url, grant).anthropic_client(max_retries=0)
    reply = model.messages.create(model="claude-test", max_tokens=10,
                                  messages=[{"role": "user", "content": "hi"}])
    seen = stack.upstream.requests[-1]
    assert seen.path == "/anthropic/v1/messages"
    assert seen.headers["x-api-key"] == stack.anthropic_secret and "authorization" not in seen.headers
    assert reply.content[0].text == f"hello; you sent key {REDACTED.decode()}"
    stack.upstream.gate.clear()
    texts: list[str] = []
    with model.messages.stream(model="claude-test", max_tokens=10,
                               messages=[{"role": "user", "content": "hi"}]) as stream:
        for text in stream.text_stream:
            texts.append(text)
            if len(texts) == 2:
                stack.upstream.gate.set()  # the last delta comes only after the first two arrived
    assert "".join(texts) == f"streamed key {REDACTED.decode()} end"
    assert stack.anthropic_secret not in "".join(texts)
    # a refused grant is an error the SDK shows with the proxy's reason
    import anthropic

    with pytest.raises(anthropic.PermissionDeniedError, match="does not cover this route"):
        Egress(stack.proxy_url, stack.grant("px-sdk", ["shop"])).anthropic_client(max_retries=0).messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert [e.outcome for e in stack.store.grants.audit("px-sdk")] == ["ok", "ok", "route_not_granted"]


def test_the_proxy_process_never_loads_celery_or_the_agent_kit(stack: Stack) -> None:
    import subprocess
    import sys

    code = ("import sys, wakeful.cli.main, wakeful.proxy.__main__, wakeful.proxy.app; "
            "from wakeful.proxy.app import create_app; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu', 'redis', 'anthropic') "
            "or m.startswith('wakeful.agent')); "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_canaries_reach_the_upstream_and_nowhere_else(stack: Stack) -> None:
    """Two canary secrets, in the proxy's environment only: after traffic that makes the
    upstream echo them (headers, JSON, gzip, a stream, the SDK) and a refused path, they are
    in no answer the worker saw, not in a pg_dump of the database (outbox, audit, grants ...)
    and not in the proxy's log; the upstream received both."""
    import shutil
    import subprocess

    grant = stack.grant("px-canary", ["shop", "anthropic"])
    seen_by_worker: list[str] = []
    with Egress(stack.proxy_url, grant).http("shop") as http:
        for path in ("/orders/99", "/gzip", "/refunds-all", "/admin"):
            r = http.get(path)
            seen_by_worker.append(str(r.headers) + r.text)
        stack.upstream.gate.set()
        r = http.get("/stream")
        seen_by_worker.append(str(r.headers) + r.text)
    model = Egress(stack.proxy_url, grant).anthropic_client(max_retries=0)
    reply = model.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    seen_by_worker.append(reply.model_dump_json())
    stack.store.ingest("px-canary", "chat", "m1", {"text": reply.content[0].text})  # what a prompt would carry
    if shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is needed to dump the database (postgresql-client)")
    dump = subprocess.run(["pg_dump", "--data-only", stack.database_url.replace("+psycopg", "")],
                          capture_output=True, text=True, timeout=120)
    assert dump.returncode == 0, dump.stderr
    assert "/orders/99" in dump.stdout and "/orders/99" in stack.proc.text()  # both are real
    places = {"answers": "\n".join(seen_by_worker), "database": dump.stdout, "proxy log": stack.proc.text()}
    for secret in (stack.shop_secret, stack.anthropic_secret):
        for where, text in places.items():
            assert secret not in text, f"a canary leaked into the {where}"
    sent = [r.headers for r in stack.upstream.requests]
    assert any(h.get("authorization") == f"Bearer {stack.shop_secret}" for h in sent)
    assert any(h.get("x-api-key") == stack.anthropic_secret for h in sent)


def test_httpx_error_when_proxy_unreachable() -> None:
    egress = Egress("http://127.0.0.1:9", "wkg_x")
    with using(egress), pytest.raises(EgressError, match="cannot reach the proxy"):
        client("shop").request("GET", "/orders/1")
    assert isinstance(egress.http("shop"), httpx.Client)


def test_web_metrics_count_the_proxys_refusals_by_route_and_outcome(stack: Stack) -> None:
    """The web process's /metrics reads the audit through the store (served on loopback)."""
    import threading
    import time

    import uvicorn
    from prometheus_client.parser import text_string_to_metric_families

    from wakeful.cli.processes import free_port
    from wakeful.web.app import create_app
    from wakeful.settings import WebSettings

    stack.get("/shop/admin", stack.grant("px-metrics", ["shop"]))
    stack.get("/shop/orders/1")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(store=stack.store, ring=lambda inbox: None,
                                                      settings=WebSettings(), broker_check=lambda: None),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("wakeful_proxy_not_ok_total", (("outcome", "path_not_allowed"), ("route", "shop")))] >= 1
    assert samples[("wakeful_proxy_not_ok_total", (("outcome", "no_grant"), ("route", "shop")))] >= 1


def test_wakeful_audit_shows_an_inboxs_requests(stack: Stack) -> None:
    import json
    import subprocess

    with Egress(stack.proxy_url, stack.grant("px-cli", ["shop"])).http("shop") as http:
        http.get("/orders/5", params={"token": "not-in-the-audit"})
    env = {"PATH": "/usr/bin:/bin", "WAKEFUL_DATABASE_URL": stack.database_url, "WAKEFUL_HOME": str(stack.home)}
    shown = subprocess.run([WAKEFUL, "audit", "px-cli", "--json"], capture_output=True, text=True, env=env,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    [row] = json.loads(shown.stdout)
    assert (row["inbox"], row["route"], row["path"], row["status"], row["outcome"]) == (
        "px-cli", "shop", "/orders/5", 200, "ok")
    table = subprocess.run([WAKEFUL, "audit", "px-cli"], capture_output=True, text=True, env=env, timeout=60)
    assert "/orders/5" in table.stdout and "not-in-the-audit" not in table.stdout + shown.stdout


def test_an_http_tool_of_the_agent_kit_runs_through_the_proxy(stack: Stack) -> None:
    """wakeful/agent/tools.py's HTTP tool and ToolCall.http reach the route under the current grant;
    a refusal is an error tool_result carrying the status and the proxy's reason."""
    from wakeful.agent.tool import Tool, ToolCall
    from wakeful.agent.tools import run

    def tool(name: str, method: str, path: str) -> Tool:
        return Tool(name=name, policy="allow", effect="write" if method == "POST" else "read",
                    description="", input_schema={"type": "object"}, route="shop", method=method, path=path)

    call = ToolCall(id="toolu_1", name="refund", inbox="px-kit", idempotency_key="wakeful-tool-kit")
    with using(Egress(stack.proxy_url, stack.grant("px-kit", ["shop"]))):
        refund = run(tool("refund", "POST", "/refunds"), {"order": 3}, call)
        lookup = run(tool("lookup", "GET", "/orders/3"), {"verbose": 1}, call)
        denied = run(tool("wipe", "POST", "/admin/wipe"), {}, call)
    assert not refund["is_error"] and '"idempotency-key": "wakeful-tool-kit"' in refund["content"]
    assert not lookup["is_error"] and '"query": "verbose=1"' in lookup["content"]
    assert denied["is_error"] and "403" in denied["content"] and "allowlist" in denied["content"]
    assert stack.shop_secret not in refund["content"] + lookup["content"]
    outside = run(tool("lookup", "GET", "/orders/3"), {}, call)  # no grant set: nothing to send
    assert outside["is_error"] and "no egress grant" in outside["content"]
