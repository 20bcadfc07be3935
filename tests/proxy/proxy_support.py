"""Fake upstreams on loopback for the proxy's tests: a real uvicorn server in a thread that
records every request it receives (method, path, query, headers, body).

- ``/shop/stream``: server-sent events; a secret split across two chunks; the last event
  waits until the test says it has read the first ones (``gate``), so passing proves the
  proxy streams as the events arrive, with no timing in the test.
- ``/shop/slow``: answers after ``slow_seconds``; ``/shop/big``: ``big_bytes`` of body;
  ``/shop/gzip``: a gzip-encoded body holding a secret; ``/shop/br`` and ``/shop/xgzip``: the
  secret under a ``Content-Encoding`` httpx passes through undecoded (``br`` without the
  brotli package, ``x-gzip``); ``/shop/encoded/{form}``: the secret re-encoded (``ENCODINGS``).
- ``/shop/...`` otherwise: echoes the request (headers included) as JSON, and its
  Authorization header in ``x-echo-auth``: the upstream that would leak a key.
- ``/anthropic/v1/messages``: a scripted Messages API (JSON, or SSE when ``stream`` is true),
  whose text echoes the ``x-api-key`` it was sent, split across chunks.
"""

from __future__ import annotations

import asyncio
import os
import gzip
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from wakeful.cli.processes import Proc, Processes, free_port, wait_for
from store import Store


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    slow_seconds: float = 5.0
    big_bytes: int = 200_000
    requests: list[Seen] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def app(self) -> Starlette:
        async def record(request: Request) -> Seen:
            seen = Seen(request.method, request.url.path, request.url.query,
                        {k.lower(): v for k, v in request.headers.items()}, await request.body())
            self.requests.append(seen)
            return seen

        async def wait_gate() -> bool:
            return await anyio.to_thread.run_sync(self.gate.wait, 30)

        async def shop(request: Request) -> Response:
            seen = await record(request)
            path = seen.path.removeprefix("/shop")
            if path == "/stream":
                return StreamingResponse(self._events(seen, wait_gate), media_type="text/event-stream")
            if path == "/slow":
                await asyncio.sleep(self.slow_seconds)
                return JSONResponse({"late": True})
            if path == "/big":
                return Response(b"x" * self.big_bytes, media_type="application/octet-stream")
            if path in ("/gzip", "/xgzip"):
                body = gzip.compress(json.dumps({"auth": seen.headers.get("authorization")}).encode())
                return Response(body, media_type="application/json",
                                headers={"content-encoding": path.removeprefix("/")})
            if path == "/br":  # not brotli at all: whoever decodes it must refuse it, not pass it on
                return Response(json.dumps({"auth": seen.headers.get("authorization")}).encode(),
                                media_type="application/json", headers={"content-encoding": "br"})
            if path.startswith("/encoded/"):
                secret = seen.headers.get("authorization", "").removeprefix("Bearer ")
                return Response(b"found: " + ENCODINGS[path.removeprefix("/encoded/")](secret).encode(),
                                media_type="text/plain")
            return JSONResponse({"method": seen.method, "path": path, "query": seen.query,
                                 "headers": seen.headers, "body": seen.body.decode(errors="replace")},
                                headers={"x-echo-auth": seen.headers.get("authorization", "")})

        async def messages(request: Request) -> Response:
            seen = await record(request)
            body = json.loads(seen.body or b"{}")
            key = seen.headers.get("x-api-key", "")
            if body.get("stream"):
                return StreamingResponse(self._messages_sse(body, key, wait_gate), media_type="text/event-stream")
            return JSONResponse(_message(body, f"hello; you sent key {key}"))

        return Starlette(routes=[Route("/anthropic/v1/messages", messages, methods=["POST"]),
                                 Route("/shop/{rest:path}", shop,
                                       methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])])

    async def _events(self, seen: Seen, wait_gate: Any):  # type: ignore[no-untyped-def]
        auth = seen.headers.get("authorization", "").encode()
        yield b"data: first\n\n"
        await asyncio.sleep(0.05)
        yield b"data: auth " + auth[:12]  # the secret, split across chunks
        await asyncio.sleep(0.05)
        yield auth[12:] + b"\n\n"
        ok = await wait_gate()
        yield b"data: " + (b"last" if ok else b"gate-timed-out") + b"\n\n"

    async def _messages_sse(self, body: dict[str, Any], key: str, wait_gate: Any):  # type: ignore[no-untyped-def]
        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        start = _message(body, "")
        start["content"], start["stop_reason"] = [], None
        yield event("message_start", {"type": "message_start", "message": start})
        yield event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
        yield event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": "streamed "}})
        split = event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": f"key {key} "}})
        cut = split.index(key.encode()) + len(key) // 2 if key else len(split) // 2
        yield split[:cut]
        await asyncio.sleep(0.05)
        yield split[cut:]
        ok = await wait_gate()
        yield event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": "end" if ok else "gate-timed-out"}})
        yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                         "stop_sequence": None},
                                      "usage": {"output_tokens": 5}})
        yield event("message_stop", {"type": "message_stop"})

    def start(self) -> "Upstream":
        self.port = free_port()
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def _message(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {"id": "msg_fake_1", "type": "message", "role": "assistant", "model": body.get("model", "m"),
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 4}}


WAKEFUL = str(Path(sys.executable).parent / "wakeful")

# How an upstream might hand a secret back re-encoded: each must come back scrubbed.
ENCODINGS = {
    "url-all-upper": lambda s: "".join(f"%{ord(c):02X}" for c in s),
    "url-all-lower": lambda s: "".join(f"%{ord(c):02x}" for c in s),
    "url-some": lambda s: "".join(f"%{ord(c):02X}" if i % 3 == 0 else c for i, c in enumerate(s)),
    "json-u-all": lambda s: "".join(f"\\u{ord(c):04x}" for c in s),
    "json-u-some": lambda s: "".join(f"\\u{ord(c):04X}" if i % 2 else c for i, c in enumerate(s)),
    "html-decimal": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "html-decimal-zeros": lambda s: "".join(f"&#{ord(c):03d};" for c in s),
    "html-hex": lambda s: "".join(f"&#x{ord(c):x};" if i % 2 else f"&#X{ord(c):X};" for i, c in enumerate(s)),
}


@dataclass
class Stack:
    store: Store
    upstream: Upstream
    proxy_url: str
    proc: Proc
    procs: Processes
    shop_secret: str
    anthropic_secret: str
    database_url: str
    home: Path

    def lease(self, inbox: str, holder: str = "w1") -> int:
        gen = self.store.acquire(inbox, holder)
        assert gen is not None
        return gen

    def grant(self, inbox: str, routes: list[str], holder: str = "w1", ttl: int = 600) -> str:
        gen = self.lease(inbox, holder)
        token = self.store.grants.mint(inbox, holder, gen, routes, ttl)
        assert token is not None
        return token

    def get(self, path: str, grant: str | None = None, method: str = "GET", **kwargs: object) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})  # type: ignore[call-overload]
        if grant is not None:
            headers["X-Wakeful-Grant"] = grant
        return httpx.request(method, self.proxy_url + path, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


SECRET_VARS = ("WAKEFUL_TEST_SHOP_TOKEN", "WAKEFUL_TEST_ANTHROPIC_KEY", "ANTHROPIC_API_KEY")


def proxy_env(home: Path, database_url: str, config: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS and not k.startswith("WAKEFUL_")}
    env.update({"WAKEFUL_HOME": str(home), "WAKEFUL_DATABASE_URL": database_url,
                "WAKEFUL_AGENT_CONFIG": str(config), "WAKEFUL_PROXY_URL": url,
                "WAKEFUL_PROXY_READ_TIMEOUT": "1.5", "WAKEFUL_PROXY_MAX_RESPONSE_BYTES": "65536",
                "WAKEFUL_PROXY_HEADER_TIMEOUT": "1"})
    env.update(extra)
    return env


def wait_healthy(url: str, proc: Proc, timeout: float = 60.0) -> None:
    def healthy() -> bool:
        if not proc.alive():
            raise RuntimeError(f"the proxy exited:\n{proc.text()[-3000:]}")
        try:
            return httpx.get(url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, timeout, "the proxy's /healthz")
