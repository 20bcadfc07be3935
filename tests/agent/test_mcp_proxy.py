"""MCP's streamable HTTP through a real ``wakeful proxy``: the scripted MCP server
(tests/agent/mcp_servers.py, the SDK's own ``MCPServer``, answering in server-sent events)
behind a route whose secret is the server's token, on a PostgreSQL store of its own.

- the handshake-era protocol (initialize, ``Mcp-Session-Id`` on every request, the GET
  stream, DELETE at the end) and the 2026-07-28 one (``Mcp-Method``/``Mcp-Name`` headers the
  server checks against the body) both pass the proxy's header allowlist;
- the MCP source (wakeful/agent/mcp.py) under a run's grant lists and calls; once the generation is
  fenced the proxy answers 403 ``fenced`` and the server sees nothing more.
"""

from __future__ import annotations

import json
import secrets
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from wakeful.agent import egress
from wakeful.agent.config import parse
from wakeful.agent.tool import ToolCall
from wakeful.agent.tools import run
from wakeful.cli.processes import Processes, free_port, wait_for
from store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))
from proxy_support import WAKEFUL, proxy_env, wait_healthy  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.processes]
SERVERS = str(Path(__file__).parent / "mcp_servers.py")


@dataclass
class Behind:
    store: Store
    proxy_url: str
    state: Path
    token: str
    proxy: Any

    def calls(self) -> list[dict[str, Any]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def grant(self, inbox: str, holder: str = "w1") -> tuple[str, int]:
        generation = self.store.acquire(inbox, holder)
        assert generation is not None
        token = self.store.grants.mint(inbox, holder, generation, ["shop_mcp"], 600)
        assert token is not None
        return token, generation


@pytest.fixture(scope="module")
def behind(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Behind]:
    from databases import create_pg_database, drop_pg_database

    name = f"wakeful_mcp_{uuid.uuid4().hex[:12]}"
    database_url = create_pg_database(name, template=pg_template)
    home = tmp_path_factory.mktemp("mcp-proxy")
    state = home / "state"
    state.mkdir()
    token, mcp_port, url = "mcp-canary-" + secrets.token_hex(12), free_port(), f"http://127.0.0.1:{free_port()}"
    config = home / "agent.toml"
    config.write_text(f"""
[routes.shop_mcp]
upstream = "http://127.0.0.1:{mcp_port}"
secret_env = "CANARY_MCP_TOKEN"
allow = ["POST /mcp", "GET /mcp", "DELETE /mcp"]
""")
    procs = Processes(proxy_env(home, database_url, config, url, WAKEFUL_PROXY_READ_TIMEOUT="30"), home / "logs")
    procs.start("mcp", [sys.executable, SERVERS, "http", str(mcp_port), str(state)],
                extra_env={"MCP_TEST_TOKEN": token})
    proxy = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={"CANARY_MCP_TOKEN": token})
    store = Store.connect(database_url, lease_ttl=600)
    try:
        wait_healthy(url, proxy)
        wait_for(lambda: _answers(f"http://127.0.0.1:{mcp_port}/mcp"), 60, "the MCP server")
        yield Behind(store, url, state, token, proxy)
    finally:
        procs.stop_all()
        store.dispose()
        drop_pg_database(name)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def _sdk_session(url: str, grant: str, mode: str) -> dict[str, Any]:
    """The SDK's own client through the proxy: list, call, and what it negotiated."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session() -> dict[str, Any]:
        async with httpx2.AsyncClient(headers={egress.GRANT_HEADER: grant}, trust_env=False) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode, cache=None,
                              read_timeout_seconds=20) as client:
                listed = await client.list_tools()
                result = await client.call_tool("lookup_order", {"order": 3})
                return {"version": client.protocol_version, "tools": [t.name for t in listed.tools],
                        "text": result.content[0].text}

    return anyio.run(session)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_both_protocol_eras_pass_the_proxy_with_the_token_put_on_and_scrubbed(behind: Behind, mode: str) -> None:
    grant, _ = behind.grant(f"sdk-{mode}")
    got = _sdk_session(f"{behind.proxy_url}/shop_mcp/mcp", grant, mode)
    assert "lookup_order" in got["tools"] and got["text"].startswith("order 3: shipped")
    assert got["text"].endswith("(auth seen: Bearer [wakeful: secret removed])")  # put on, and scrubbed back
    assert (got["version"] == "2026-07-28") == (mode == "auto")
    audit = behind.store.grants.audit(f"sdk-{mode}")
    assert audit and all(a.route == "shop_mcp" and a.status < 400 for a in audit)
    if mode == "legacy":  # a session, ended through the proxy (the session header passed both ways)
        # (The SDK may also open its optional GET stream, in the background: not asserted.)
        assert "DELETE" in {a.method for a in audit}


def test_the_mcp_source_lists_and_calls_under_a_grant_and_is_refused_once_fenced(behind: Behind) -> None:
    cfg = parse({"routes": {"shop_mcp": {}}, "mcp": {"shop": {
        "route": "shop_mcp", "policy": "ask", "tools": {"lookup_order": {"policy": "allow", "effect": "read"}}}}},
        "<config>")
    assert set(cfg.tools) == {"lookup_order"}  # no grant yet: only what the config names
    grant, generation = behind.grant("fenced-inbox")
    with egress.using(egress.Egress(behind.proxy_url, grant)):
        assert {"refund", "flaky_refund", "lookup_order"} <= set(cfg.tools)  # listed under the grant
        read = run(cfg.tools["lookup_order"], {"order": 4}, ToolCall("toolu_a", "lookup_order", "fenced-inbox", "k"),
                   cfg)
    assert read["content"].startswith("order 4: shipped") and not read["is_error"]
    # the listing negotiated (server/discover) and listed; the call reused the discovery (the
    # SDK lists once more after a call, for the tool's output schema): 4 requests, not 5
    assert [a.status for a in behind.store.grants.audit("fenced-inbox")] == [200, 200, 200, 200]
    before = len(behind.calls())
    assert behind.store.release("fenced-inbox", "w1", generation)
    assert behind.store.acquire("fenced-inbox", "w2") == generation + 1  # another worker holds it now
    with egress.using(egress.Egress(behind.proxy_url, grant)):
        late = run(cfg.tools["lookup_order"], {"order": 5}, ToolCall("toolu_b", "lookup_order", "fenced-inbox", "k"),
                   cfg)
    assert late["is_error"] and "HTTP 403" in late["content"] and "no longer holds the inbox" in late["content"]
    assert len(behind.calls()) == before  # nothing reached the server
    refused = [a for a in behind.store.grants.audit("fenced-inbox") if a.outcome == "fenced"]
    assert refused and all(a.status == 403 and a.generation == generation for a in refused)
    assert behind.token not in behind.proxy.text()


def test_an_executor_that_never_listed_lists_under_the_effects_grant_and_runs_it_once(
        behind: Behind, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process whose first MCP work is an effect (a worker just restarted): the tool came
    from the server's default, no table names it, so only a listing knows it."""
    from wakeful.agent.effects import execute_runnable
    from store import Effect, Outcome

    monkeypatch.setenv(egress.PROXY_URL_ENV, behind.proxy_url)
    inbox = "exec-inbox"
    generation = behind.store.acquire(inbox, "w1")
    assert generation is not None
    assert behind.store.finish(inbox, "w1", generation, [], outcome=Outcome(
        effects=[Effect("toolu_exec_1", "refund", {"order": 8})]))
    assert behind.store.release(inbox, "w1", generation)
    cfg = parse({"routes": {"shop_mcp": {}}, "mcp": {"shop": {"route": "shop_mcp", "policy": "allow",
                                                              "effect": "write"}}}, "<config>")
    assert "refund" not in cfg.tools  # nothing listed yet in this "process"
    [executed] = execute_runnable(behind.store, cfg, inbox=inbox)
    assert executed.outcome == "done"
    [effect] = behind.store.effects.view(inbox)
    refunds = [c for c in behind.calls() if c["tool"] == "refund" and c["key"] == effect.idempotency_key]
    assert len(refunds) == 1 and effect.status == "done"


def test_a_custom_loop_is_offered_an_http_servers_tools_under_its_runs_grant(
        behind: Behind, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool kit (wakeful/agent/kit.py) lists through the proxy under a grant bound to the run's
    lease, as the claude loop does: a custom loop is told the server's tools, not only the
    ones with a table of their own."""
    from wakeful.agent import Run
    from wakeful.agent.kit import Toolkit

    monkeypatch.setenv(egress.PROXY_URL_ENV, behind.proxy_url)
    cfg = parse({"routes": {"shop_mcp": {}}, "mcp": {"shop": {
        "route": "shop_mcp", "policy": "ask", "tools": {"lookup_order": {"policy": "allow", "effect": "read"}}}}},
        "<config>")
    generation = behind.store.acquire("kit-inbox", "w1")
    assert generation is not None
    run = Run(inbox="kit-inbox", events=[], generation=generation, memory={},
              _mint_grant=lambda routes, ttl: behind.store.grants.mint("kit-inbox", "w1", generation, routes, ttl))
    offered = {t["name"] for t in Toolkit(run, cfg).offered()}
    assert {"refund", "lookup_order"} <= offered
    assert [a.route for a in behind.store.grants.audit("kit-inbox")] and all(
        a.route == "shop_mcp" and a.status == 200 for a in behind.store.grants.audit("kit-inbox"))
