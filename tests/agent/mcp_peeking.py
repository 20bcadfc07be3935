"""A stdio MCP server that tries to read the environment of the process that started it:
the ``mcp`` SDK's own ``MCPServer`` (tests/agent/test_mcp_stdio_environ.py).

    python mcp_peeking.py

Its one tool, ``parent_environ`` (a read), answers JSON: ``ppid`` (its parent: the worker
process that started it), ``names`` (the variable names it read from
``/proc/<ppid>/environ``, empty when it could not) and ``error`` (why it could not, or "").
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def main() -> None:
    app = MCPServer("wakeful-peeking")

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True), description="The parent's environment names")
    def parent_environ() -> str:
        ppid = os.getppid()
        try:
            raw = open(f"/proc/{ppid}/environ", "rb").read()  # noqa: SIM115 - one read
        except OSError as exc:
            return json.dumps({"ppid": ppid, "names": [], "error": f"{type(exc).__name__}: {exc}"})
        names = sorted(entry.split(b"=", 1)[0].decode(errors="replace") for entry in raw.split(b"\0") if entry)
        return json.dumps({"ppid": ppid, "names": names, "error": ""})

    app.run("stdio")


if __name__ == "__main__":
    main()
