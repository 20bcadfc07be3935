"""Scenario 12's MCP server: the ``mcp`` SDK's own ``MCPServer`` on stdio, one write.

    python fault_mcp.py CALL_LOG

Each call of ``refund`` appends the idempotency key it found in the request's ``_meta``
(wakeful/agent/mcp.py's META_KEY) to CALL_LOG before it answers; the scenario maps each key to its
tool use through the effects table, so the checker counts MCP executions like the others."""

from __future__ import annotations

import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

META_KEY = "dev.wakeful/idempotency-key"


def main(call_log: str) -> None:
    server = MCPServer("wakeful-fault-mcp")

    @server.tool(description="Refund an order (a write through MCP)")
    def refund(order: int, ctx: Context) -> str:
        meta = ctx.request_context.meta or {}
        with open(call_log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": meta.get(META_KEY), "tool": "mcp_refund"}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"done {{'order': {order}}}"

    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1])
