"""One trace follows a wake across real processes (issue 25, part 4; docs/operating.md "Traces").

The runtime tests' cluster (a dense run worker, the control worker, beat) with the claude
agent, a real ``wakeful proxy`` holding the route secrets, the scripted Messages API and the
shop as its upstreams, and a real web edge (``python -m wakeful.web``). Every process exports its
spans as JSON lines to a file of its own (``WAKEFUL_TRACES_TEST_DIR``, the test exporter of
wakeful/telemetry.py). Then:

- a signed GitHub webhook: one trace id on the web edge's span, the run task, the run, the
  model call (``chat {model}``), the proxy's span for that call (a child of it, across the
  process boundary by ``traceparent``) and the outbox send in the control worker;
- a ``wakeful.ingest`` task call: the ingest span starts the trace, which goes on through the
  run, a read tool inline (``execute_tool lookup_order``) and its proxied request;
- a write approved through its link: the answer's wake (from the web edge's doorbell), the
  effect executed after the commit (``execute_tool refund``) and its proxied request share a
  trace;
- no canary (the route secrets, the webhook secret, the approval secret and link token, the
  message text, any grant) appears in any span attribute of any process.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env
from wakeful.cli.processes import Processes, free_port, wait_for
from store.tables import grants
from test_agent_through_proxy import proxied_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from proxy_support import Upstream, wait_healthy  # noqa: E402  (tests/proxy: the fake shop)
from web_signing import body_of, github_headers  # noqa: E402  (tests/web: how GitHub signs)

WAKEFUL = str(Path(sys.executable).parent / "wakeful")


def spans(directory: Path) -> list[dict[str, Any]]:
    """Every span every process wrote so far (a line still being written is skipped)."""
    found = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def one(found: list[dict[str, Any]], name: str, **attributes: Any) -> dict[str, Any]:
    matching = [s for s in found if s["name"] == name
                and all(s["attributes"].get(k) == v for k, v in attributes.items())]
    assert len(matching) == 1, f"{name} {attributes}: {len(matching)} spans\n{_names(found)}"
    return matching[0]


def _names(found: list[dict[str, Any]]) -> str:
    return "\n".join(f"{s['trace_id'][:8]} {s['service']:<16} {s['name']}" for s in found)


def test_one_trace_follows_a_wake_across_web_worker_proxy_and_control(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    canary = {name: f"{name}-canary-{secrets.token_hex(10)}" for name in
              ("anthropic_key", "shop_token", "hook_secret", "approval_secret", "text")}
    traces, port = tmp_path / "traces", free_port()
    shop = Upstream().start()
    proxy_url = f"http://127.0.0.1:{free_port()}"
    with ScriptedModel() as model:
        config = proxied_config(tmp_path / "agent.toml", model.base_url, shop.url,
                                agent_extra='trusted_sources = ["chat"]')
        c = make_cluster(run_workers=1, env={
            **agent_env(config, "http://127.0.0.1:9/unused", tool_log), "ANTHROPIC_API_KEY": "",
            "WAKEFUL_PROXY_URL": proxy_url, "WAKEFUL_TRACES_TEST_DIR": str(traces),
            # No tick during the test: each wake goes on in the trace of the ring it made (a
            # sweep or a dispatch tick that came first would take it into its own trace).
            "WAKEFUL_SWEEP_INTERVAL": "120", "WAKEFUL_DISPATCH_INTERVAL": "120",
            "WAKEFUL_GITHUB_SECRETS": canary["hook_secret"], "WAKEFUL_WEB_PORT": str(port),
            "WAKEFUL_APPROVAL_SECRET": canary["approval_secret"], "WAKEFUL_PUBLIC_URL": f"http://127.0.0.1:{port}"})
        database_url = c.store.engine.url.render_as_string(hide_password=False)
        procs = Processes({**c.env, "WAKEFUL_DATABASE_URL": database_url}, tmp_path / "more-logs")
        try:
            proxy = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
                "CANARY_ANTHROPIC_KEY": canary["anthropic_key"], "CANARY_SHOP_TOKEN": canary["shop_token"]})
            procs.start("web", [sys.executable, "-m", "wakeful.web"])
            wait_healthy(proxy_url, proxy)
            wait_for(lambda: _up(port), 60, "the web edge")

            # 1. A signed webhook: web edge -> run worker -> proxy -> control's outbox send.
            body = body_of({"action": "opened", "comment": canary["text"]})
            answer = httpx.post(f"http://127.0.0.1:{port}/hooks/github/ada", content=body,
                                headers=github_headers(canary["hook_secret"], body, delivery="d-1"))
            assert answer.status_code == 202, answer.text
            c.wait(lambda: c.sent("ada"), "the reply to the webhook sent")
            c.wait(lambda: [s for s in spans(traces) if s["name"] == "wakeful.outbox.send"], "the send's span")

            # 2. A wakeful.ingest task call: a read inline, and a write asked for approval.
            c.ingest("bo", "chat", "1", {"text": f'{canary["text"]}\ncall lookup_order {{"order": 7}}\n'
                                                 'call refund {"order": 8}'})
            [asked] = c.wait(lambda: c.store.effects.view("bo"), "the refund asked")
            link = c.wait(lambda: re.findall(r"http://\S+token=\S+", "\n".join(m["body"] for m in c.sent("bo"))),
                          "the approval link sent")[0]
            # 3. Approved through the link: the effect runs after the commit.
            approved = httpx.post(link, data={"answer": "yes"})
            assert approved.status_code == 200 and approved.json()["outcome"] == "yes", approved.text
            c.wait(lambda: [p for p in shop.paths() if p.startswith("/shop/refunds")], "the approved refund")
            c.wait(lambda: [s for s in spans(traces) if s["name"] == "execute_tool refund"
                            and s["attributes"].get("wakeful.effect.attempt")], "the effect's span")
            with c.store.engine.connect() as conn:
                grant_hashes = set(conn.execute(select(grants.c.token_hash)).scalars())
        finally:
            procs.stop_all()
            shop.stop()
    found = spans(traces)

    # 1. The webhook's wake: one trace id from the web edge to the outbox send.
    edge = one(found, "POST /hooks/github/{inbox}", **{"wakeful.inbox": "ada"})
    wake = [s for s in found if s["trace_id"] == edge["trace_id"]]
    run = one(wake, "wakeful.run", **{"wakeful.inbox": "ada"})
    chat = one(wake, "chat claude-scripted")
    served = one(wake, "POST /anthropic")
    send = one(wake, "wakeful.outbox.send", **{"wakeful.inbox": "ada"})
    assert edge["parent_id"] is None and edge["service"] == "wakeful-web"
    assert run["service"] == "wakeful-runs0" and chat["service"] == "wakeful-runs0"
    # The proxy's span is the model call's child, or the SDK's own span's below it (anthropic
    # 2.x traces its calls and sends their traceparent): one process boundary, one trace.
    below_chat = {chat["span_id"]} | {s["span_id"] for s in wake if s["parent_id"] == chat["span_id"]}
    assert served["service"] == "wakeful-proxy" and served["parent_id"] in below_chat
    assert send["service"] == "wakeful-control" and send["attributes"]["wakeful.outbox.channel"] == "jsonl"
    assert {"run/wakeful.run_inbox", "wakeful.dispatch_outbox"} <= {s["name"] for s in wake}
    assert chat["attributes"]["gen_ai.operation.name"] == "chat"
    assert chat["attributes"]["gen_ai.request.model"] == "claude-scripted"
    assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0 and chat["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert served["attributes"]["wakeful.proxy.outcome"] == "ok"

    # 2. The task call's wake: ingest -> run -> model -> read tool -> its proxied request.
    ingest = [s for s in found if s["name"] == "wakeful.ingest" and s["trace_id"] in
              {r["trace_id"] for r in found if r["name"] == "wakeful.run"
               and r["attributes"].get("wakeful.inbox") == "bo"}]
    assert ingest and ingest[0]["service"] == "wakeful-control"
    task_wake = [s for s in found if s["trace_id"] == ingest[0]["trace_id"]]
    lookup = one(task_wake, "execute_tool lookup_order")
    assert lookup["attributes"]["gen_ai.tool.name"] == "lookup_order"
    assert [s for s in task_wake if s["name"] == "GET /shop" and s["parent_id"] == lookup["span_id"]]
    assert len([s for s in task_wake if s["name"] == "chat claude-scripted"]) >= 1

    # 3. The effect after the commit, and its proxied request, in one trace.
    effect = [s for s in found if s["name"] == "execute_tool refund" and s["attributes"].get("wakeful.effect.attempt")]
    [effect] = effect
    assert [s for s in found if s["name"] == "POST /shop" and s["parent_id"] == effect["span_id"]
            and s["trace_id"] == effect["trace_id"]]
    executed = [s for s in found if s["name"] == "run/wakeful.execute_effects" and s["span_id"] == effect["parent_id"]]
    assert executed and executed[0]["attributes"]["wakeful.effect.outcome"] == "done"
    answered = [s for s in found if s["trace_id"] == effect["trace_id"]]
    woken = [s["attributes"]["wakeful.event_sources"] for s in answered if s["name"] == "wakeful.run"]
    assert ["approval"] in woken and set(map(tuple, woken)) <= {("approval",), ("tool",)}  # + the result's run
    assert [s for s in answered if s["name"] == "apply_async/wakeful.run_inbox" and s["service"] == "wakeful-web"]

    # No canary in any attribute (or event) of any span; no grant either.
    token = re.search(r"token=([^\s&]+)", link).group(1)
    leaked = [(s["name"], name) for s in found for name, value in canary.items()
              if value in json.dumps([s["attributes"], s["events"]])]
    assert not leaked and token not in json.dumps(found)
    words = {w for s in found for w in re.split(r"[^A-Za-z0-9_\-.~+/=]+", json.dumps(s["attributes"])) if w}
    assert grant_hashes and not {hashlib.sha256(w.encode()).hexdigest() for w in words} & grant_hashes
    assert canary["text"] in json.dumps(model.requests)  # the haystack is real: the model saw it


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_retried_run_apart_stays_in_its_trace(make_cluster: Any, write_config: Any,
                                               model: ScriptedModel, tool_log: Path, tmp_path: Path) -> None:
    """A retried event runs in a process of its own (tasks/isolation.py): the model call made
    there is a child of the run's span in the worker, in the same trace, and reaches the file
    before the worker has the answer (the child may be killed right after)."""
    traces = tmp_path / "traces"
    c = make_cluster(env={**agent_env(write_config(), model.base_url, tool_log),
                          "WAKEFUL_TRACES_TEST_DIR": str(traces)})
    model.fail_next(1, status=400)  # not an outage: the run fails, the event is retried
    c.ingest("cy", "chat", "1", {"text": "hello"})
    c.wait(lambda: c.settled("cy", 1), "the retried event done")
    found = spans(traces)
    runs = [s for s in found if s["name"] == "wakeful.run" and s["attributes"].get("wakeful.inbox") == "cy"]
    assert [r["attributes"]["wakeful.run.outcome"] for r in runs] == ["error", "done"]
    [apart] = [s for s in found if s["name"] == "chat claude-scripted" and s["service"] == "wakeful-apart"]
    assert apart["trace_id"] == runs[1]["trace_id"] and apart["parent_id"] == runs[1]["span_id"]
    assert apart["pid"] != runs[1]["pid"]
