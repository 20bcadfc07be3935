"""MCP servers under the policy, in real processes: run and control workers, beat, a real
``wakeful proxy``, the scripted Messages API, and the scripted MCP servers
(tests/agent/mcp_servers.py: the ``mcp`` SDK's own server) over streamable HTTP on loopback,
behind the proxy, and over stdio, started by the worker processes themselves.

- through the proxy: a read runs inline; a write, asked and answered yes, runs exactly once
  with the effect's idempotency key in ``_meta``; a tool the server adds later is refused; the
  server's token (a route secret, in the proxy's environment only) is in no worker
  environment, log, prompt, outbox, Redis or ``pg_dump``, even though the server echoes it;
- the executor SIGKILLed between the call and its record, over stdio (the server kills its
  parent) and over HTTP (the test kills it while the server holds the call): the call is made
  again with the same key, and the effect is settled once;
- a run worker SIGSTOPped past its lease: its MCP read is refused 403 ``fenced`` at the proxy
  and its write is never committed, so never run.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env
from wakeful.cli.processes import Proc, Processes, free_port, wait_for
from test_agent_through_proxy import _redis_dump

HERE = Path(__file__).parent
WAKEFUL = str(Path(sys.executable).parent / "wakeful")
SERVERS = str(HERE / "mcp_servers.py")
ORDER = '{ type = "object", properties = { order = { type = "integer" } }, required = ["order"] }'


def _config(path: Path, model_url: str, mcp_port: int, state: Path, stdio_state: Path) -> Path:
    path.write_text(f"""
[agent]
model = "claude-scripted"
system = "You run errands."
trusted_sources = ["chat"]
effect_timeout = 4

[routes.anthropic]
upstream = "{model_url}"
secret_env = "CANARY_ANTHROPIC_KEY"
header = "x-api-key"
allow = ["POST /v1/messages"]

[routes.shop_mcp]
upstream = "http://127.0.0.1:{mcp_port}"
secret_env = "CANARY_MCP_TOKEN"
allow = ["POST /mcp", "GET /mcp", "DELETE /mcp"]

# Each offered tool's text is pinned (the operator's, not the server's): the server's own
# would taint every conversation, and the allowed writes below would be asked (docs/mcp.md).
[mcp.shop]
route = "shop_mcp"
path = "/mcp"
policy = "deny"
effect = "write"
list_ttl = 1

[mcp.shop.tools.lookup_order]
policy = "allow"
effect = "read"
description = "Look an order up by number"
input_schema = {ORDER}

[mcp.shop.tools.refund]
policy = "ask"
effect = "write"
approval_ttl = 600
description = "Refund an order"
input_schema = {ORDER}

[mcp.shop.tools.flaky_refund]
policy = "allow"
effect = "write"
trusted_output = true
description = "Refund an order"
input_schema = {ORDER}

[mcp.files]
command = "{sys.executable}"
args = ["{SERVERS}", "stdio", "{stdio_state}"]
prefix = "files_"
policy = "deny"

[mcp.files.tools.flaky_refund]
policy = "allow"
effect = "write"
trusted_output = true
description = "Refund an order"
input_schema = {ORDER}
""")
    return path


@dataclass
class Served:
    cluster: Any
    model: ScriptedModel
    proxy: Proc
    mcp: Proc
    state: Path  # the HTTP server's calls.jsonl and lists.jsonl
    stdio_state: Path

    def calls(self, state: Path | None = None) -> list[dict[str, Any]]:
        path = (state or self.state) / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def lists(self) -> list[list[str]]:
        path = self.state / "lists.jsonl"
        return [json.loads(line)["tools"] for line in path.read_text().splitlines()] if path.exists() else []

    def replies(self, inbox: str) -> str:
        return "\n".join(r.body for r in self.cluster.store.outbox(inbox))


@contextmanager
def served(make_cluster: Any, tmp_path: Path, tool_log: Path, token: str, anthropic_key: str) -> Iterator[Served]:
    """The workers hold no key; the proxy holds the model's key and the MCP server's token;
    the MCP server (its own process) accepts only that token."""
    state, stdio_state = tmp_path / "mcp-state", tmp_path / "stdio-state"
    state.mkdir()
    stdio_state.mkdir()
    mcp_port, proxy_url = free_port(), f"http://127.0.0.1:{free_port()}"
    with ScriptedModel() as model:
        config = _config(tmp_path / "agent.toml", model.base_url, mcp_port, state, stdio_state)
        env = {**agent_env(config, "http://127.0.0.1:9/unused", tool_log), "WAKEFUL_PROXY_URL": proxy_url,
               "ANTHROPIC_API_KEY": ""}
        c = make_cluster(run_workers=1, env=env)
        database_url = c.store.engine.url.render_as_string(hide_password=False)
        procs = Processes({**c.env, "WAKEFUL_DATABASE_URL": database_url}, tmp_path / "side-logs")
        server = procs.start("mcp", [sys.executable, SERVERS, "http", str(mcp_port), str(state)],
                             extra_env={"MCP_TEST_TOKEN": token})
        proxy = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
            "CANARY_ANTHROPIC_KEY": anthropic_key, "CANARY_MCP_TOKEN": token})
        try:
            wait_for(lambda: _answers(proxy_url + "/healthz") and _answers(f"http://127.0.0.1:{mcp_port}/mcp"),
                     60, "the proxy and the MCP server")
            yield Served(c, model, proxy, server, state, stdio_state)
        finally:
            procs.stop_all()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def test_an_mcp_read_runs_inline_a_write_asked_runs_once_and_no_token_leaves_the_proxy(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    token, anthropic_key = "mcp-canary-" + secrets.token_hex(12), "sk-ant-canary-" + secrets.token_hex(12)
    with served(make_cluster, tmp_path, tool_log, token, anthropic_key) as s:
        c = s.cluster
        c.ingest("ada", "chat", "1", {"text": 'call lookup_order {"order": 7}'})
        c.wait(lambda: "order 7: shipped" in s.replies("ada"), "the read's reply")
        assert "[wakeful: secret removed]" in s.replies("ada")  # the server echoed its token: scrubbed
        c.ingest("ada", "chat", "2", {"text": 'call refund {"order": 7}'})
        [asked] = c.wait(lambda: c.store.effects.view("ada"), "the refund asked")
        assert s.calls() and not [x for x in s.calls() if x["tool"] == "refund"]  # nothing before the yes
        assert "the output of lookup_order" in asked.why  # the MCP answer was data: it tainted the talk
        shown = json.dumps(s.model.requests)
        assert "<untrusted" in shown and "order 7: shipped" in shown
        assert c.store.answer_approval("ada", asked.tool_use_id, "yes") == "yes"
        c.wait(lambda: "refunded order 7" in s.replies("ada"), "the refund's result reported", timeout=60)
        # a tool the server adds later: listed (list_ttl = 1) but denied until configured
        (s.state / "add_wipe").touch()
        n = 3
        while not any("wipe" in names for names in s.lists()):
            c.ingest("ada", "chat", str(n), {"text": f"ping {n}"})
            c.wait(lambda: f"ping {n}" in s.replies("ada"), f"the reply to ping {n}")
            n += 1
            assert n < 60, "the server was never listed again"
        c.ingest("ada", "chat", "wipe", {"text": 'call wipe {"order": 7}'})
        c.wait(lambda: "wipe failed" in s.replies("ada"), "the refusal of wipe")
    refunds = [x for x in s.calls() if x["tool"] == "refund"]
    assert len(refunds) == 1 and refunds[0]["key"] == asked.idempotency_key  # once, with the effect's key
    assert not [x for x in s.calls() if x["tool"] == "wipe"]
    assert "appeared after the first listing" in c.logs(tail=10**7)
    audit = c.store.grants.audit("ada")
    assert "shop_mcp" in {a.route for a in audit} and all(a.status < 400 for a in audit)
    everything = "\n".join([
        json.dumps(s.model.requests), s.replies("ada"), c.logs(tail=10**7), s.proxy.text(),
        _redis_dump(c.broker_url), json.dumps(c.env),
        subprocess.run(["pg_dump", "-h", "127.0.0.1", "-U", "postgres", c.store.engine.url.database],
                       capture_output=True, text=True, check=True).stdout])
    assert "lookup_order" in everything and "refunded order 7" in everything  # the haystack is real
    assert token not in everything and anthropic_key not in everything


def test_an_mcp_write_whose_executor_dies_between_call_and_record_is_called_again_with_the_same_key(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    with served(make_cluster, tmp_path, tool_log, "mcp-" + secrets.token_hex(12),
                "sk-ant-" + secrets.token_hex(12)) as s:
        c = s.cluster
        [executor] = c.run_workers  # the run workers execute the effects too (the runs queue)
        c.ingest("cy", "chat", "1", {"text": 'call files_flaky_refund {"order": 5}'})
        c.wait(lambda: s.calls(s.stdio_state), "the first call")
        c.wait(lambda: not executor.alive(), "the executor killed by its server between call and record")
        c.procs.wait_ready(c.procs.worker("runs-b", ("wakeful.runs",)))  # what a supervisor does
        c.wait(lambda: "refunded order 5" in s.replies("cy"), "the write's result after the retake", timeout=120)
        [effect] = c.store.effects.view("cy")
    calls = [x for x in s.calls(s.stdio_state) if x["tool"] == "flaky_refund"]
    assert len(calls) == 2 and {x["key"] for x in calls} == {effect.idempotency_key}  # at least once, one key
    assert effect.status == "done" and effect.attempts == 2
    assert len({x["pid"] for x in calls}) == 2  # a new executor process, a new server process of its own


def test_an_mcp_write_over_http_whose_executor_dies_mid_call_is_called_again_with_the_same_key(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    with served(make_cluster, tmp_path, tool_log, "mcp-" + secrets.token_hex(12),
                "sk-ant-" + secrets.token_hex(12)) as s:
        c = s.cluster
        [executor] = c.run_workers
        c.ingest("di", "chat", "1", {"text": 'call flaky_refund {"order": 6}'})
        c.wait(lambda: s.calls(), "the first call, held by the server")
        c.procs.kill(executor, signal.SIGKILL)  # between the call and its record
        (s.state / "release").touch()
        c.procs.wait_ready(c.procs.worker("runs-b", ("wakeful.runs",)))
        c.wait(lambda: "refunded order 6" in s.replies("di"), "the write's result after the retake", timeout=120)
        [effect] = c.store.effects.view("di")
    calls = [x for x in s.calls() if x["tool"] == "flaky_refund"]
    assert len(calls) == 2 and {x["key"] for x in calls} == {effect.idempotency_key}
    assert effect.status == "done" and effect.attempts == 2
    audit = [a for a in c.store.grants.audit("di") if a.route == "shop_mcp"]
    assert {a.tool_use_id for a in audit} == {None, effect.tool_use_id}  # the runs' listings; the effect's calls


def test_a_stalled_workers_mcp_calls_are_refused_fenced_and_its_write_never_runs(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    with served(make_cluster, tmp_path, tool_log, "mcp-" + secrets.token_hex(12),
                "sk-ant-" + secrets.token_hex(12)) as s:
        c, model = s.cluster, s.model
        [first] = c.run_workers
        hold = model.hold_next()
        c.ingest("bo", "chat", "1", {"text": 'call lookup_order {"order": 9}\ncall refund {"order": 9}'})
        c.wait(lambda: len(model.requests) == 1, "the first worker's model call")
        c.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
        second = c.procs.worker("runs-b", ("wakeful.runs",))
        c.procs.wait_ready(second)
        c.wait(lambda: len(c.store.effects.view("bo")) == 1, "the second worker's run committed")
        reads_before = [x for x in s.calls() if x["tool"] == "lookup_order"]
        hold.set()  # the stalled worker's reply arrives: an MCP read and an MCP write of its own
        c.procs.kill(first, signal.SIGCONT)
        c.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced", timeout=60)
        [effect] = c.store.effects.view("bo")
    assert len(reads_before) == 1 and [x for x in s.calls() if x["tool"] == "lookup_order"] == reads_before
    assert not [x for x in s.calls() if x["tool"] == "refund"]  # no yes for the second's; none for the first's
    assert effect.generation == 2 and effect.status != "done"
    refused = [a for a in c.store.grants.audit("bo") if a.outcome == "fenced"]
    assert refused and all(a.status == 403 and a.generation == 1 for a in refused)
    assert "shop_mcp" in {a.route for a in refused}
