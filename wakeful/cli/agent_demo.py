"""``wakeful demo agent``: the claude agent with tools, through real processes, offline.

A bundled scripted model (wakeful/agent/scripted.py, the real Messages API wire format on loopback)
stands in for Claude, so nothing leaves the machine. With ``ANTHROPIC_API_KEY`` set and no
``ANTHROPIC_BASE_URL``, the same agent talks to the real API instead (the scenes then ask in
plain words and the account shows what the model chose, without checking it).

Scenes: ask -> the link in the outbox -> Yes -> the refund runs once; a denied tool; an
approval left to expire -> never runs, the model is told; a tool of an MCP server (a stdio
server bundled here, ``python -m wakeful.cli.agent_demo mcp-server``, which the worker starts with
only the environment its ``[mcp.parcels]`` table names; docs/mcp.md); offline, the same
config under Pydantic AI's loop (the run worker restarted on wakeful/examples/pydantic_ai_loop.py):
the same approval, Yes, the refund once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from wakeful.cli.demo import DEMO_ENV

APPROVAL_TTL = 6  # seconds: the expiry scene waits this long
PYDANTIC_AI_LOOP = "wakeful.examples.pydantic_ai_loop:agent"  # scene 5: a framework's loop, same config
# The demo's MCP server, a stdio one the worker starts on first use (wakeful/agent/mcp.py).
MCP_CONFIG = """
[mcp.parcels]
command = "{python}"
args = ["-m", "wakeful.cli.agent_demo", "mcp-server"]
env = {{ PARCELS_REGION = "eu" }}
policy = "deny"  # the server's default: only the tools configured below are offered

[mcp.parcels.tools.track_parcel]
policy = "allow"
effect = "read"
# Pinned: the text the model reads is this table's, reviewed, not whatever the server lists
# later (unpinned server text taints the conversation: docs/mcp.md).
description = "Where a parcel is, by its number"
input_schema = {{ type = "object", properties = {{ parcel = {{ type = "string" }} }}, required = ["parcel"] }}
"""


def run_agent_demo(directory: Path | None = None, keep: bool = False) -> int:
    home = Path(directory or tempfile.mkdtemp(prefix="wakeful-agent-demo-")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    real = bool(os.environ.get("ANTHROPIC_API_KEY")) and not os.environ.get("ANTHROPIC_BASE_URL")
    for name in [k for k in os.environ if k.startswith("WAKEFUL_")]:
        del os.environ[name]
    model = None
    if not real:
        from wakeful.agent.scripted import ScriptedModel

        model = ScriptedModel().start()
        os.environ.update({"ANTHROPIC_BASE_URL": model.base_url, "ANTHROPIC_API_KEY": "offline"})
    from wakeful.agent.demo_tools import CONFIG

    config = home / "agent.toml"
    config.write_text(CONFIG.format(model="claude-sonnet-4-5" if real else "scripted", ttl=APPROVAL_TTL)
                      + MCP_CONFIG.format(python=sys.executable))
    os.environ.update(DEMO_ENV)
    os.environ.update({"WAKEFUL_HOME": str(home), "WAKEFUL_AGENT": "claude",
                       "WAKEFUL_AGENT_CONFIG": str(config),
                       "WAKEFUL_OUTBOX_CHANNEL": f"jsonl:{home / 'sent.jsonl'}"})
    demo = AgentDemo(home, real)
    ok = False
    try:
        demo.start()
        demo.ask_yes_once()
        demo.deny()
        demo.expire()
        demo.mcp_tool()
        if not real:  # the example's model is Pydantic AI's offline FunctionModel
            demo.framework_loop()
        ok = not demo.failures
    except Exception as exc:  # a timeout or a process that would not start: say so, stop all
        print(f"\n  UNEXPECTED: {type(exc).__name__}: {exc}")
    finally:
        demo.stop()
        if model is not None:
            model.stop()
    print("\nEvery step happened as described." if ok else f"\nSomething did not happen; logs: {home / 'logs'}")
    if keep or not ok:
        print(f"Demo files kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if ok else 1


class AgentDemo:
    def __init__(self, home: Path, real: bool) -> None:
        self.home, self.real, self.failures = home, real, []

    def start(self) -> None:
        from wakeful.cli.processes import CONTROL_QUEUES, RUN_QUEUES, Processes, free_port
        from tasks import app, embedded
        from tasks.celeryconfig import QUEUES
        from tasks.runtime import get_store

        self.app, self.store = app, get_store()
        self.store.migrate()
        embedded.init(app, QUEUES)
        port = free_port()
        self.web_url = f"http://127.0.0.1:{port}"
        os.environ["WAKEFUL_PUBLIC_URL"] = self.web_url
        self.procs = Processes(env=dict(os.environ), logdir=self.home / "logs")
        # The approval key stays with the dispatcher (control) and the web edge.
        worker_env = {k: v for k, v in os.environ.items() if k != "WAKEFUL_APPROVAL_SECRET"}
        self.worker_env = worker_env
        self.runs = Processes(env=worker_env, logdir=self.home / "logs")
        self.worker = self.runs.worker("worker", RUN_QUEUES)
        self.procs.procs.append(self.worker)
        control = self.procs.worker("control", CONTROL_QUEUES, concurrency=2)
        beat = self.procs.beat()
        self.procs.start("web", [sys.executable, "-m", "wakeful.web"], extra_env={"WAKEFUL_WEB_PORT": str(port)})
        self.procs.wait_ready(self.worker, control, beat)
        self.wait(self._web_up, "the web edge")
        print("wakeful demo agent: Claude with tools behind the fenced lease "
              f"({'the real API' if self.real else 'a bundled scripted model, offline'})")
        print(f"  home {self.home}; a run worker (no approval key), control, beat and web started")

    def stop(self) -> None:
        if hasattr(self, "procs"):
            self.procs.stop_all(grace=15)

    # -- scenes ----------------------------------------------------------------------------

    def ask_yes_once(self) -> None:
        import httpx

        print("\n1. Ada asks for a refund: the tool is `ask`, so a human must say yes first")
        self.say("ada", "1", "Please refund order 881." if self.real else
                 'I will refund order 881.\ncall refund {"order": 881}')
        request = self.wait(lambda: self._sent("ada", "Approval needed"), "the approval request")
        print("   outbox -> " + request.replace("\n", "\n             "))
        link = re.search(r"http://\S+/approvals/\S+", request)
        self.check(link is not None, "a signed link in the approval request")
        url, token = link.group(0).split("?token=")
        answer = httpx.post(url, data={"answer": "yes", "token": token}, timeout=10).json()
        print(f"   a human opens the link and clicks Yes -> {answer['outcome']}")
        reply = self.wait(lambda: self._sent("ada", "refunded order 881"), "the agent's reply")
        print(f"   the effect ran after the commit; the agent says: {reply}")
        refunds = self._refunds()
        print(f"   refunds executed: {len(refunds)} (idempotency key {refunds[0]['key'] if refunds else '-'})")
        self.check(len(refunds) == 1, "exactly one refund")

    def deny(self) -> None:
        print("\n2. A denied tool: never offered; named anyway, it gets an error and nothing runs")
        self.say("bob", "1", "Delete my account." if self.real else 'call delete_account {"order": 1}')
        reply = self.wait(lambda: self._sent("bob", ""), "the agent's reply")
        print(f"   the agent says: {reply}")

    def expire(self) -> None:
        print(f"\n3. Nobody answers: after {APPROVAL_TTL} s the approval expires and the refund never runs")
        self.say("cy", "1", "Please refund order 77." if self.real else 'call refund {"order": 77}')
        self.wait(lambda: self._sent("cy", "Approval needed"), "the approval request")
        reply = self.wait(lambda: self._sent("cy", "expired"), "the agent told of the expiry",
                          timeout=APPROVAL_TTL + 30)
        print(f"   the agent says: {reply}")
        self.check(not [r for r in self._refunds() if r["order"] == 77], "no refund of order 77")

    def mcp_tool(self) -> None:
        print("\n4. A tool from an MCP server: a stdio server the worker started, with only the "
              "environment its table names")
        self.say("dee", "1", "Where is parcel PX-1?" if self.real else 'call track_parcel {"parcel": "PX-1"}')
        reply = self.wait(lambda: self._sent("dee", "parcel PX-1"), "the agent's reply")
        print(f"   the agent says: {reply}")
        self.check("out for delivery" in reply, "the MCP server answered the read, inline")

    def framework_loop(self) -> None:
        from wakeful.cli.processes import RUN_QUEUES, Processes

        print("\n5. The same agent.toml under Pydantic AI's own loop: the run worker restarted with\n"
              f"   WAKEFUL_AGENT={PYDANTIC_AI_LOOP}; wakeful still decides every tool call")
        self.runs.stop(self.worker)
        runs = Processes(env={**self.worker_env, "WAKEFUL_AGENT": PYDANTIC_AI_LOOP}, logdir=self.home / "logs")
        self.worker = runs.worker("worker-pydantic-ai", RUN_QUEUES)
        self.procs.procs.append(self.worker)
        runs.wait_ready(self.worker)
        self.say("eve", "1", 'call refund {"order": 990}')
        request = self.wait(lambda: self._sent("eve", "Approval needed"), "the approval request")
        link = re.search(r"http://\S+/approvals/\S+", request)
        self.check(link is not None, "the same approval request, with its signed link")
        if link is None:
            return
        import httpx

        url, token = link.group(0).split("?token=")
        answer = httpx.post(url, data={"answer": "yes", "token": token}, timeout=10).json()
        print(f"   Yes -> {answer['outcome']}")
        reply = self.wait(lambda: self._sent("eve", "refunded order 990"), "Pydantic AI's reply")
        print(f"   Pydantic AI read the result back and says: {reply}")
        self.check(len([r for r in self._refunds() if r["order"] == 990]) == 1, "exactly one refund of order 990")

    # -- plumbing --------------------------------------------------------------------------

    def say(self, inbox: str, source_id: str, text: str) -> None:
        self.app.send_task("wakeful.ingest", kwargs={"inbox": inbox, "source": "chat",
                                                     "source_id": source_id, "payload": {"text": text}})

    def check(self, condition: bool, what: str) -> None:
        print(f"   {'ok' if condition else 'NOT AS DESCRIBED'}: {what}")
        if not condition:
            self.failures.append(what)

    def wait(self, condition: Any, what: str, timeout: float = 40.0) -> Any:
        from wakeful.cli.processes import wait_for

        return wait_for(condition, timeout, what)

    def _sent(self, inbox: str, text: str) -> str | None:
        path = self.home / "sent.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        bodies = [json.loads(line)["body"] for line in lines if json.loads(line)["inbox"] == inbox]
        return next((b for b in bodies if text in b), None)

    def _refunds(self) -> list[dict[str, Any]]:
        path = self.home / "refunds.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def _web_up(self) -> bool:
        import httpx

        try:
            return httpx.get(self.web_url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


def serve_demo_mcp() -> None:
    """The demo's MCP server on stdio: the ``mcp`` SDK's own ``MCPServer`` with one read."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("wakeful-demo-parcels")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Track a parcel by its number")
    def track_parcel(parcel: str) -> str:
        region = os.environ.get("PARCELS_REGION", "?")
        return f"parcel {parcel}: out for delivery in region {region}, arriving today"

    server.run("stdio")


if __name__ == "__main__":
    if sys.argv[1:2] == ["mcp-server"]:
        serve_demo_mcp()
    else:
        sys.exit(run_agent_demo())
