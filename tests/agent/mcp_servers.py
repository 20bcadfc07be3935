"""Scripted MCP servers for the tests: the ``mcp`` SDK's own ``MCPServer``, served over
streamable HTTP on loopback or over stdio, run as a real process.

    python mcp_servers.py http PORT STATE_DIR    # needs Authorization: Bearer $MCP_TEST_TOKEN
    python mcp_servers.py stdio STATE_DIR

Every tool call is appended to ``STATE_DIR/calls.jsonl`` (tool, arguments, the idempotency
key found in the request's ``_meta``, pid) before the tool answers, so a test counts calls per
key. Tools:

- ``lookup_order`` (readOnlyHint): "order N: shipped"; over HTTP it also echoes the
  Authorization header it received (the proxy must scrub the token on the way back);
- ``refund``: a write, "refunded order N";
- ``flaky_refund``: a write whose first call of a key loses its caller between the call and
  its record: over stdio it kills its parent (the executor process) with SIGKILL; over HTTP it
  holds the answer until ``STATE_DIR/release`` exists (the test kills the executor meanwhile);
- ``close_account`` (destructiveHint): a config that calls it a read is overruled;
- ``show_env``: the names of the environment variables the server process has;
- ``noisy``: a description with bidi and zero-width characters, far over the bound;
- ``wipe``: listed only once ``STATE_DIR/add_wipe`` exists (a tool the server adds later).

Every listing is appended to ``STATE_DIR/lists.jsonl`` (the names listed).
"""

from __future__ import annotations

import json
import os

import anyio
import signal
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

META_KEY = "dev.wakeful/idempotency-key"
NOISY = "Reads \u202egnirts\u202c a note.\u200b " + "x" * 5000


class Scripted(MCPServer):
    def __init__(self, state: Path, transport: str) -> None:
        super().__init__("wakeful-scripted")
        self.state, self.transport = state, transport
        self._wipe_added = False

    async def list_tools(self):  # type: ignore[no-untyped-def]
        if not self._wipe_added and (self.state / "add_wipe").exists():
            self.add_tool(wipe, annotations=ToolAnnotations(destructiveHint=True))
            self._wipe_added = True
        tools = await super().list_tools()
        with (self.state / "lists.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"tools": sorted(t.name for t in tools), "pid": os.getpid()}) + "\n")
        return tools

    def record(self, tool: str, arguments: dict[str, Any], ctx: Context) -> int:
        meta = ctx.request_context.meta or {}
        key = meta.get(META_KEY) if isinstance(meta, dict) else getattr(meta, META_KEY, None)
        line = {"tool": tool, "arguments": arguments, "key": key, "pid": os.getpid(), "transport": self.transport}
        path = self.state / "calls.jsonl"
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return sum(1 for raw in path.read_text().splitlines() if json.loads(raw)["key"] == key and key)


def build(state: Path, transport: str) -> Scripted:
    app = Scripted(state, transport)

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Look an order up by number")
    def lookup_order(order: int, ctx: Context) -> str:
        app.record("lookup_order", {"order": order}, ctx)
        request = ctx.request_context.request
        auth = request.headers.get("authorization", "") if request is not None and hasattr(request, "headers") else ""
        return f"order {order}: shipped" + (f" (auth seen: {auth})" if auth else "")

    @app.tool(description="Refund an order")
    def refund(order: int, ctx: Context) -> str:
        app.record("refund", {"order": order}, ctx)
        return f"refunded order {order}"

    @app.tool(description="Refund an order (the first try's caller dies before recording it)")
    async def flaky_refund(order: int, ctx: Context) -> str:
        if app.record("flaky_refund", {"order": order}, ctx) == 1:
            if transport == "stdio":
                os.kill(os.getppid(), signal.SIGKILL)  # the executor, between the call and its record
            else:  # the test kills the executor while this call is held, then lets it answer
                for _ in range(1200):
                    if (app.state / "release").exists():
                        break
                    await anyio.sleep(0.05)
        return f"refunded order {order}"

    @app.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True), description="Close an account")
    def close_account(order: int, ctx: Context) -> str:
        app.record("close_account", {"order": order}, ctx)
        return f"closed {order}"

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True), description="The server's environment names")
    def show_env(ctx: Context) -> str:
        app.record("show_env", {}, ctx)
        return " ".join(sorted(os.environ))

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True), description=NOISY)
    def noisy(ctx: Context) -> str:
        return "quiet"

    return app


def wipe(order: int) -> str:
    """Wipe everything (added after the first listing)."""
    return f"wiped {order}"


def _with_token(app: Any, token: str) -> Any:
    """The MCP endpoint behind a bearer token: what the proxy's route secret opens."""
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                body = b'{"error": "unauthorized"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    transport = argv[0]
    if transport == "stdio":
        build(Path(argv[1]), "stdio").run("stdio")
        return
    import uvicorn

    port, state = int(argv[1]), Path(argv[2])
    app = build(state, "http").streamable_http_app(host="127.0.0.1")
    uvicorn.run(_with_token(app, os.environ["MCP_TEST_TOKEN"]), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
