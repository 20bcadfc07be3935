"""An outage is not a poison event (issue 27), with real worker, control and beat processes on
PostgreSQL and Redis, the real SDK against the scripted Messages API on loopback.

- the Messages API refusing connections, then answering 529 overloaded with a Retry-After
  twice, then normally: the event is answered once, nothing is dead, and the attempts are not
  charged for the outage, while a poison event beside it (the agent raises an ordinary
  exception) is still dead at the cap;
- the same through ``wakeful proxy``, the proxy restarted and then its upstream down;
- the outage horizon reached (set short): dead with the reason ``outage``; ``wakeful
  requeue`` brings it back and it is answered;
- a write whose shop is down after the commit is tried again under the same idempotency key
  and reaches the shop once when it is back.

The outages last until the runtime has waited them out several times over (counted in
``events.waits``), never a fixed time: each one outlives what the attempt cap (3, backoff 1-2 s
here) allowed before, when such an event was dead after its third try.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy import select

from wakeful.agent.scripted import ScriptedModel
from agent_support import BASE_TOOLS, agent_env, calls
from wakeful.cli.processes import Processes, free_port
from store.tables import events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))
from proxy_support import wait_healthy  # noqa: E402  (tests/proxy)

WAKEFUL = str(Path(sys.executable).parent / "wakeful")
# Quick outage backoff (1, then up to 2 s), and the SDK's own retries off, so every refused
# connection and 529 reaches the runtime's rule instead of being absorbed by the SDK.
OUTAGE_ENV = {"WAKEFUL_OUTAGE_BACKOFF_BASE": "1", "WAKEFUL_OUTAGE_BACKOFF_MAX": "2"}
TOOLS = {**BASE_TOOLS, "invoice": {"call": "agent_tools:invoice", "policy": "allow", "effect": "write"}}


def _waits(cluster: Any, inbox: str, source_id: str) -> int:
    with cluster.store.engine.connect() as conn:
        return conn.execute(select(events.c.waits).where(
            events.c.inbox == inbox, events.c.source_id == source_id)).scalar() or 0  # 0: not stored yet


def _event(cluster: Any, inbox: str, source_id: str) -> Any:
    [event] = [e for e in cluster.store.events(inbox) if e.source_id == source_id]
    return event


def _status(cluster: Any, inbox: str, source_id: str) -> str | None:
    """The event's status, None until it is stored (ingest goes through the broker)."""
    return next((e.status for e in cluster.store.events(inbox) if e.source_id == source_id), None)


def _replies(cluster: Any, inbox: str, text: str) -> list[str]:
    return [r.body for r in cluster.store.outbox(inbox) if text in r.body]


def _start(make_cluster: Any, write_config: Any, model_url: str, tool_log: Path, **env: str) -> Any:
    config = write_config(TOOLS, timeout=5, max_retries=0)
    return make_cluster(env={**agent_env(config, model_url, tool_log), **OUTAGE_ENV, **env})


def test_the_model_api_down_then_overloaded_costs_no_attempt_and_a_poison_event_still_dies(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model.base_url, tool_log,
                     WAKEFUL_AGENT="agent_tools:claude_or_poison")
    model.refuse_connections()
    cluster.ingest("ada", "chat", "hello", {"text": "hello"})
    cluster.ingest("bob", "chat", "poison", {"text": "poison"})  # beside it, in its own inbox
    # Four waits: under the attempt cap's rules the event was dead after its third claim.
    cluster.wait(lambda: _waits(cluster, "ada", "hello") >= 4, "hello to wait out the outage 4 times", timeout=120)
    # Between two tries (not while one runs) the operator sees the inbox waiting on an outage.
    cluster.wait(lambda: cluster.store.status("ada").waiting_on_outage >= 1, "wakeful status to show the outage")
    cluster.wait(lambda: cluster.store.operator.metrics()["inboxes_waiting_on_outage"] == 1, "/metrics to show it")
    model.fail_next(2, 529, retry_after=1)
    model.accept_connections()
    cluster.wait(lambda: _replies(cluster, "ada", "Noted: hello"), "the answer once the API is back", timeout=120)
    cluster.wait(lambda: _status(cluster, "bob", "poison") == "dead", "the poison event dead at the cap")
    hello, poison = _event(cluster, "ada", "hello"), _event(cluster, "bob", "poison")
    assert (hello.status, hello.attempts) == ("done", 1)  # no attempt charged for the outage
    assert _waits(cluster, "ada", "hello") >= 6  # the two 529s were waited out too
    assert poison.attempts == 3 and "ValueError: this event breaks the agent" in (poison.error or "")
    assert len(_replies(cluster, "ada", "Noted: hello")) == 1
    answered = [r for r in model.replies if "Noted: hello" in json.dumps(r)]
    assert len(answered) == 1  # the model answered it once
    assert [e.source_id for e in cluster.store.dead()] == ["poison"]
    assert "waiting" in {r.outcome for r in cluster.store.operator.run_log("ada")}
    assert cluster.store.operator.metrics()["inboxes_waiting_on_outage"] == 0


def test_past_the_outage_horizon_the_event_is_dead_for_an_outage_and_requeue_brings_it_back(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, model.base_url, tool_log, WAKEFUL_OUTAGE_HORIZON="3")
    model.refuse_connections()
    cluster.ingest("ada", "chat", "late", {"text": "late"})
    cluster.wait(lambda: _status(cluster, "ada", "late") == "dead", "dead past the horizon", timeout=120)
    dead = _event(cluster, "ada", "late")
    assert dead.attempts == 0 and (dead.error or "").startswith("outage: ")
    model.accept_connections()
    requeued = subprocess.run([WAKEFUL, "requeue", str(dead.id)], env=cluster.env, capture_output=True,
                              text=True, timeout=60)
    assert requeued.returncode == 0, requeued.stderr
    cluster.wait(lambda: _replies(cluster, "ada", "Noted: late"), "the requeued event answered")
    assert (_event(cluster, "ada", "late").status, _event(cluster, "ada", "late").attempts) == ("done", 1)


class Shop:
    """A loopback shop that is down (nothing listens on its port) until ``open()``; it counts
    the invoices it receives and their idempotency keys."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[tuple[str, dict[str, Any]]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                shop.received.append((self.headers.get("idempotency-key") or "", body))
                self.send_response(201)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def test_a_write_whose_shop_is_down_waits_and_runs_once_with_its_key_when_it_is_back(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    shop = Shop()
    try:
        cluster = _start(make_cluster, write_config, model.base_url, tool_log, WAKEFUL_TEST_SHOP_URL=shop.url)
        cluster.ingest("ada", "chat", "1", {"text": 'call invoice {"order": 5}'})
        cluster.wait(lambda: len([c for c in calls(tool_log) if c["tool"] == "invoice"]) >= 4,
                     "the invoice tried while the shop is down", timeout=120)
        [effect] = cluster.store.effects.view("ada")
        assert effect.status in ("ready", "executing") and effect.result is None  # waiting, not failed
        shop.open()
        cluster.wait(lambda: _replies(cluster, "ada", "invoice: invoiced order 5: 201"), "the result reported")
        [effect] = cluster.store.effects.view("ada")
        tries = [c for c in calls(tool_log) if c["tool"] == "invoice"]
        assert shop.received == [(effect.idempotency_key, {"order": 5})]  # reached the shop once
        assert {c["key"] for c in tries} == {effect.idempotency_key} and effect.status == "done"
        assert [c["attempt"] for c in tries] == list(range(1, len(tries) + 1))
    finally:
        shop.close()


def test_through_the_proxy_restarted_then_its_upstream_down_the_event_waits_and_is_answered_once(
        make_cluster: Any, write_config: Any, tmp_path: Path, tool_log: Path) -> None:
    with ScriptedModel() as model:
        config = write_config({}, timeout=5, max_retries=0)
        config.write_text(config.read_text() + f'\n[routes.anthropic]\nupstream = "{model.base_url}"\n'
                          'secret_env = "OUTAGE_TEST_KEY"\nheader = "x-api-key"\nallow = ["POST /v1/messages"]\n')
        proxy_url = f"http://127.0.0.1:{free_port()}"
        env = {**agent_env(config, "http://127.0.0.1:9/unused", tool_log), **OUTAGE_ENV,
               "WAKEFUL_PROXY_URL": proxy_url, "ANTHROPIC_API_KEY": ""}
        cluster = make_cluster(env=env)
        database_url = cluster.store.engine.url.render_as_string(hide_password=False)
        procs = Processes({**cluster.env, "WAKEFUL_DATABASE_URL": database_url}, tmp_path / "proxy-logs")
        try:
            cluster.ingest("ada", "chat", "1", {"text": "while the proxy is away"})  # no proxy yet
            cluster.wait(lambda: _waits(cluster, "ada", "1") >= 3, "the event to wait for the proxy", timeout=120)
            model.refuse_connections()  # the proxy comes back, its upstream is down: 502
            proxy = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={"OUTAGE_TEST_KEY": "k-outage"})
            wait_healthy(proxy_url, proxy)
            cluster.wait(lambda: any(a.status == 502 for a in cluster.store.grants.audit("ada")), "a 502 from the proxy",
                         timeout=120)
            procs.stop(proxy)  # restarted
            proxy = procs.start("proxy-again", [WAKEFUL, "proxy"], extra_env={"OUTAGE_TEST_KEY": "k-outage"})
            wait_healthy(proxy_url, proxy)
            model.accept_connections()
            cluster.wait(lambda: _replies(cluster, "ada", "Noted: while the proxy is away"), "the answer", timeout=120)
        finally:
            procs.stop_all()
        event = _event(cluster, "ada", "1")
        assert (event.status, event.attempts) == ("done", 1) and _waits(cluster, "ada", "1") >= 4
        assert len(_replies(cluster, "ada", "Noted: while the proxy is away")) == 1
        assert cluster.store.dead() == []

