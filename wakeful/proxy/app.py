"""The egress proxy: ``{WAKEFUL_PROXY_URL}/{route}/{path}`` goes to the route's upstream with
the route's secret on it, if the request's grant and the route's allowlist say so.

For each request, in order (nothing goes upstream until all of them pass):

1. The grant: ``X-Wakeful-Grant``, else the ``x-api-key`` or ``Authorization: Bearer`` header
   (so an SDK given the grant as its API key works unchanged). None: 401.
2. The store's check (one statement, store/grants.py): forged, expired, fenced (its lease
   generation no longer holds the inbox), effect done, or the route not covered: 403.
3. The route exists (404), the path has no dot, empty or encoded-slash segment, and the
   route's allowlist allows the method and path: 403 otherwise.
4. The request goes upstream with only the headers of ``_REQUEST_PASSED`` (an allowlist: no
   credentials, cookies, grant or method/URL override ever), the route's secret in the
   route's header and ``Accept-Encoding: identity`` (a compressed body could not be
   scrubbed). Unreachable: 502; silent past the read timeout: 504.
5. The response streams back as it arrives (server-sent events included), every route
   secret replaced in its headers and body (wakeful/proxy/scrub.py), cut at ``max_response_bytes``.
   A content encoding the proxy cannot decode is refused (502): it could not be scrubbed.
6. One audit row (store/grants.py): inbox, generation, tool use, route, method, path without
   its query, status, bytes, duration, outcome. Never a header or a body. A route that does
   not exist is recorded as ``(unknown)``, and refusals of callers without a live grant only
   within ``refusals_per_second`` (store.grants.UNGRANTED).

Refusals answer in the Messages API's error shape (``{"type": "error", "error": {"type",
"message"}}``) so the anthropic SDK, and any tool, shows the reason; the header
``x-wakeful-refused`` names the outcome.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio
import httpx
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route as StarletteRoute
from starlette.types import Receive, Scope, Send

from wakeful import telemetry
from wakeful.settings import ProxySettings
from store.budget import WriteBudget
from store.grants import OUTCOMES, UNGRANTED, UNKNOWN_ROUTE, GrantCheck

from .routes import Route
from .scrub import Scrubber, Secrets

log = logging.getLogger("wakeful.proxy")

GRANT_HEADER = "x-wakeful-grant"
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
               "trailers", "transfer-encoding", "upgrade"}
# The only request headers that go upstream, and any ``anthropic-*`` one. An allowlist, so a
# header the proxy does not know never passes: X-HTTP-Method-Override or X-Original-URL
# cannot make an allowed GET /orders/7 into a DELETE or another path behind the allowlist's
# back. What a JSON API needs: the body's type, what the caller accepts, a write's
# idempotency key; and the Messages API's own anthropic-version and anthropic-beta (no other
# upstream reads anthropic-*). Not passed: credentials, cookies and the grant (the route's
# secret replaces them), Host, Content-Length and Accept-Encoding (the proxy sets them),
# forwarding and hop-by-hop headers, and the SDK's x-stainless-* telemetry (the worker's OS,
# runtime and retry count: nothing an upstream needs to answer). A route that needs one more
# lists it in ``pass_headers`` (wakeful/proxy/routes.py).
# MCP's streamable HTTP (docs/mcp.md) needs its own: ``Mcp-Session-Id`` and
# ``Last-Event-ID`` (a session and a resumed stream, 2025 revisions), ``MCP-Protocol-Version``,
# and the 2026-07-28 revision's ``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*`` (copies of
# the JSON-RPC body the server checks against it): no other upstream reads ``mcp-*``, none is
# a credential, and a server refuses a request whose copies are missing.
_REQUEST_PASSED = frozenset({"accept", "accept-language", "content-type", "idempotency-key", "user-agent",
                             "last-event-id"})
_REQUEST_PASSED_PREFIXES = ("anthropic-", "mcp-")
# The body is re-chunked (and may change length when scrubbed) and arrives decompressed.
_RESPONSE_DROPPED = _HOP_BY_HOP | {"content-length", "content-encoding"}
# Content encodings httpx always decodes (zlib is in the standard library). The proxy asks for
# identity; anything else (br and zstd are decoded only when an optional package happens to
# be installed, x-gzip and compress never) would reach the caller undecoded, so unscrubbed.
_DECODED = frozenset({"identity", "gzip", "deflate"})
_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                413: "request_too_large", 502: "api_error", 503: "api_error", 504: "timeout_error"}


def grant_of(headers: Headers) -> str | None:
    """The request's grant: X-Wakeful-Grant, else what an SDK sends as its API key."""
    for name in (GRANT_HEADER, "x-api-key"):
        value = headers.get(name, "").strip()
        if value:
            return value
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def passed_headers(headers: Headers, route: Route) -> list[tuple[bytes, bytes]]:
    """The caller's headers that go upstream: ``_REQUEST_PASSED`` and the route's own."""
    def passes(name: str) -> bool:
        return name in _REQUEST_PASSED or name.startswith(_REQUEST_PASSED_PREFIXES) or name in route.pass_headers

    return [(k, v) for k, v in headers.raw if passes(k.decode("latin-1").lower())]


def decodable(upstream: httpx.Response) -> bool:
    """Is every content encoding of the answer one the proxy decodes before scrubbing?"""
    codings = {c.strip().lower() for value in upstream.headers.get_list("content-encoding")
               for c in value.split(",")} - {""}
    return codings <= _DECODED


@dataclass(frozen=True)
class Target:
    route: str  # the route's name, as asked
    raw: str  # the path after the route, as sent (percent-encoded), for the upstream
    path: str | None  # decoded, for the allowlist; None when a segment is unsafe


def target_of(raw_path: bytes) -> Target:
    """``/route/rest``: the route and the path below it. A path with a ``.``/``..``/empty
    segment, or one hiding ``/``, ``\\``, ``%`` or NUL behind percent-encoding, has no
    decoded form: an upstream could resolve it outside the prefix the allowlist checked."""
    text = raw_path.decode("latin-1")
    _, _, rest = text.partition("/")
    name, slash, below = rest.partition("/")
    raw = "/" + below if slash else "/"
    segments = raw.split("/")[1:]
    decoded = []
    for n, segment in enumerate(segments):
        try:
            value = unquote(segment, errors="strict") if "%" in segment else segment
        except UnicodeDecodeError:  # not UTF-8 behind the escapes: no decoded form to check
            return Target(unquote(name), raw, None)
        last = n == len(segments) - 1
        if (segment == "" and not last) or value in (".", "..") or any(c in value for c in "/\\%\x00"):
            return Target(unquote(name), raw, None)
        decoded.append(value)
    return Target(unquote(name), raw, "/" + "/".join(decoded))


class Proxy:
    """The ASGI app behind every ``/{route}/...`` request."""

    def __init__(self, routes: Mapping[str, Route], store: Any, settings: ProxySettings) -> None:
        self.routes = dict(routes)
        self.store = store
        self.settings = settings
        self.secrets = Secrets.of(r.secret for r in self.routes.values())  # compiled once
        self.client: httpx.AsyncClient | None = None
        self.budget = WriteBudget(settings.refusals_per_second)
        self.unrecorded = 0  # refusals answered and logged but over the budget (/healthz)

    def new_client(self) -> httpx.AsyncClient:
        s = self.settings
        return httpx.AsyncClient(
            # A caller beyond ``upstream_connections`` waits its turn for one as long as it
            # would wait for an answer: at the connect timeout, 23 of 1,200 calls of 10 s
            # through 1,000 connections got 504 with the upstream healthy (docs/performance.md).
            timeout=httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout, write=s.read_timeout,
                                  pool=s.read_timeout),
            limits=httpx.Limits(max_connections=s.upstream_connections,
                                max_keepalive_connections=s.upstream_connections),
            follow_redirects=False,  # a redirect goes back to the caller, who asks the proxy again
            trust_env=False)  # HTTP(S)_PROXY and netrc are not this process's business

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Continues the worker's trace (its traceparent); the request's attributes are its
        # route, method and outcome, never a header, a query or a body.
        if not telemetry.on():
            return await self.serve(scope, receive, send)
        route = target_of(scope.get("raw_path") or scope["path"].encode()).route
        name = route if route in self.routes else "(unknown)"
        with telemetry.span(f"{scope['method']} /{name}", kind=telemetry.SERVER, parent=Headers(scope=scope),
                            attributes={"http.request.method": scope["method"], "wakeful.route": name}):
            await self.serve(scope, receive, send)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        method = scope["method"]
        headers = Headers(scope=scope)
        raw_path = scope.get("raw_path") or scope["path"].encode()
        target = target_of(raw_path)
        route = self.routes.get(target.route)
        if route is None:  # the asked name is kept in the path (as sent), never as a key
            exchange = Exchange(self, send, UNKNOWN_ROUTE, method, raw_path.decode("latin-1"), started)
        else:
            exchange = Exchange(self, send, route.name, method, target.path or target.raw, started)
        grant = grant_of(headers)
        if grant is None:
            return await exchange.refuse(GrantCheck(401, "no_grant"), 401, "no_grant")
        try:
            check = await anyio.to_thread.run_sync(self.store.grants.check, grant, target.route)
        except Exception as exc:  # noqa: BLE001 - the store is down: refuse, and say so
            log.error("proxy: grant check failed: %s", type(exc).__name__)
            return await exchange.answer(503, "the proxy cannot reach its store", "store_down")
        if route is None:
            return await exchange.refuse(check, 404, "unknown_route")
        if not check.allowed:
            return await exchange.refuse(check, check.status, check.outcome)
        if target.path is None:
            return await exchange.refuse(check, 403, "bad_path")
        if not route.allows(method, target.path):
            return await exchange.refuse(check, 403, "path_not_allowed")
        body = await _read_body(receive, headers, self.settings.max_request_bytes)
        if body is _GONE:  # never forward a body cut short: a write would go out half-empty
            return await exchange.record(check, 499, 0, "client_gone")
        if body is None:
            return await exchange.refuse(check, 413, "request_too_large")
        await exchange.forward(check, route, target, headers, scope.get("query_string", b""), body, receive)


_GONE = b"<the caller went away>"


async def _read_body(receive: Receive, headers: Headers, limit: int) -> bytes | None:
    """The whole request body; None when over ``limit``; ``_GONE`` when the caller left."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _GONE
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


@dataclass
class Flow:
    """A response on its way back: bytes sent so far, and how it is going."""

    size: int = 0
    outcome: str = "ok"


class Exchange:
    """One request's way through the proxy, and its audit row."""

    def __init__(self, proxy: Proxy, send: Send, route: str, method: str, path: str, started: float) -> None:
        self.proxy, self.send = proxy, send
        self.route, self.method, self.path, self.started = route, method, path, started
        self.span = telemetry.current()  # the request's span (Proxy.__call__)

    async def refuse(self, check: GrantCheck, status: int, outcome: str) -> None:
        # Recorded first: by the time the caller reads the refusal, the audit has it. A caller
        # without a live grant for the route is recorded only within the budget.
        written = outcome not in UNGRANTED or self.proxy.budget.take()
        if not written:
            self.proxy.unrecorded += 1
        await self.record(check, status, 0, outcome, written)
        await self.answer(status, OUTCOMES[outcome], outcome)

    async def answer(self, status: int, reason: str, outcome: str) -> None:
        body = json.dumps({"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"),
                                                       "message": f"wakeful proxy: {reason}"}}).encode()
        await self.send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"x-wakeful-refused", outcome.encode())]})
        await self.send({"type": "http.response.body", "body": body})

    async def record(self, check: GrantCheck, status: int, size: int, outcome: str, written: bool = True) -> None:
        ms = int((time.monotonic() - self.started) * 1000)
        traced = {"http.response.status_code": status, "wakeful.proxy.outcome": outcome,
                  "wakeful.inbox": check.inbox, "wakeful.generation": check.generation}
        self.span.set_attributes({k: v for k, v in traced.items() if v is not None})
        log.info("proxy: %s %s %s -> %s %s (%d bytes, %d ms, inbox %s, generation %s)%s", self.route,
                 self.method, self.path[:200], status, outcome, size, ms, check.inbox, check.generation,
                 "" if written else " not recorded: over the refusal budget")
        if not written:
            return
        with anyio.CancelScope(shield=True):  # a caller that went away still leaves its row
            try:
                await anyio.to_thread.run_sync(lambda: self.proxy.store.grants.record_egress(
                    check, self.route, self.method, self.path, status, size, ms, outcome))
            except Exception as exc:  # noqa: BLE001 - the answer is sent; say the row is missing
                log.error("proxy: audit row not written (%s): %s %s %s", type(exc).__name__,
                          self.route, self.method, self.path[:200])

    async def forward(self, check: GrantCheck, route: Route, target: Target, headers: Headers,
                      query: bytes, body: bytes, receive: Receive) -> None:
        url = route.upstream + target.raw + (("?" + query.decode("latin-1")) if query else "")
        name, secret = route.credential()
        outgoing = passed_headers(headers, route) + [(name.encode(), secret.encode()),
                                                     (b"accept-encoding", b"identity")]
        client = self.proxy.client
        assert client is not None, "the proxy's HTTP client starts with the app (lifespan)"
        if not telemetry.on():
            return await self._forward(check, client, url, outgoing, body, receive, telemetry.current())
        with telemetry.span(self.method, kind=telemetry.CLIENT, attributes={
                "http.request.method": self.method, "server.address": httpx.URL(route.upstream).host,
                "wakeful.route": route.name}) as upstream_span:
            await self._forward(check, client, url, outgoing, body, receive, upstream_span)

    async def _forward(self, check: GrantCheck, client: httpx.AsyncClient, url: str,
                       outgoing: list[tuple[bytes, bytes]], body: bytes, receive: Receive, span: Any) -> None:
        try:
            request = client.build_request(self.method, url, headers=outgoing, content=body)
            upstream = await client.send(request, stream=True)
            span.set_attribute("http.response.status_code", upstream.status_code)
        except httpx.TimeoutException:
            return await self.refuse(check, 504, "upstream_timeout")
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("proxy: %s upstream unreachable: %s", self.route, type(exc).__name__)
            return await self.refuse(check, 502, "upstream_down")
        if not decodable(upstream):
            await upstream.aclose()
            return await self.refuse(check, 502, "upstream_encoding")
        try:
            size, outcome = await self.relay(upstream, receive)
        finally:
            await upstream.aclose()
        await self.record(check, upstream.status_code, size, outcome)
        if outcome != "client_gone":  # the end of the body, once the audit has the request
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def relay(self, upstream: httpx.Response, receive: Receive) -> tuple[int, str]:
        """Stream the scrubbed response, all but its end; (bytes sent, outcome)."""
        scrubber = Scrubber(self.proxy.secrets)
        headers = [(scrubber.whole(k), scrubber.whole(v)) for k, v in upstream.headers.raw
                   if k.decode("latin-1").lower() not in _RESPONSE_DROPPED]
        await self.send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
        flow = Flow()
        limit = self.proxy.settings.max_response_bytes

        async def emit(data: bytes) -> bool:
            room = limit - flow.size
            if len(data) > room:
                data, flow.outcome = data[:room], "response_cut"
            if data:
                flow.size += len(data)
                await self.send({"type": "http.response.body", "body": data, "more_body": True})
            return flow.outcome == "ok"

        async def pump(cancel: anyio.CancelScope) -> None:
            try:
                async for chunk in upstream.aiter_bytes():
                    if not await emit(scrubber.feed(chunk)):
                        break
            except httpx.TimeoutException:
                flow.outcome = "upstream_timeout"
            except httpx.HTTPError:
                flow.outcome = "upstream_cut"
            if flow.outcome != "response_cut":
                await emit(scrubber.finish())
            cancel.cancel()

        async def watch(cancel: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            flow.outcome = "client_gone"
            cancel.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pump, tasks.cancel_scope)
            tasks.start_soon(watch, tasks.cancel_scope)
        return flow.size, flow.outcome


def create_app(routes: Mapping[str, Route], store: Any, settings: ProxySettings | None = None) -> Starlette:
    """The proxy as an ASGI app: ``GET /healthz`` and every ``/{route}/...`` path."""
    telemetry.setup("proxy")  # traces, when an exporter is configured (docs/operating.md)
    proxy = Proxy(routes, store, settings or ProxySettings())

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        async with proxy.new_client() as client:
            proxy.client = client
            yield

    async def healthz(request: Request) -> JSONResponse:
        try:
            await anyio.to_thread.run_sync(store.transactions.ping)
        except Exception as exc:  # noqa: BLE001 - any failure means the store is down
            return JSONResponse({"store": f"down ({type(exc).__name__})"}, status_code=503)
        # "process": which of the proxy's processes answered (WAKEFUL_PROXY_PROCESSES); the
        # refusals unrecorded are that process's.
        return JSONResponse({"store": "ok", "routes": sorted(proxy.routes), "refusals_unrecorded": proxy.unrecorded,
                             "process": os.getpid()})

    return Starlette(routes=[StarletteRoute("/healthz", healthz, methods=["GET"]), Mount("", app=proxy)],
                     lifespan=lifespan)
