"""The claude agent with every credential in the egress proxy: real worker, control and beat
processes, a real ``wakeful proxy``, the scripted Messages API and a shop as the upstreams.

The workers have no key at all (no ANTHROPIC_API_KEY, no route secret): each run mints a grant
bound to its lease for the model's route and its inline read tools' routes; a write's route is
granted to its effect alone. Two canary secrets live in the proxy's environment only; after an
allowed read, an approved write and a refused one, neither is in the database, the outbox, any
process's log, the broker's Redis (task results: what Flower shows) or any prompt the model was
sent, while the upstreams received both.
"""

from __future__ import annotations

import json
import secrets
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
from wakeful.cli.processes import Processes, free_port, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))
from proxy_support import Upstream  # noqa: E402  (tests/proxy: the fake shop)

WAKEFUL = str(Path(sys.executable).parent / "wakeful")
SCHEMA = '{ type = "object", properties = { order = { type = "integer" } }, required = ["order"] }'


def proxied_config(path: Path, model_url: str, shop_url: str, agent_extra: str = "") -> Path:
    """The claude agent through the proxy: the model's route, the shop's route, a read
    allowed and a write asked (``agent_extra``: more [agent] lines)."""
    path.write_text(f"""
[agent]
model = "claude-scripted"
system = "You run errands."
{agent_extra}

[routes.anthropic]
upstream = "{model_url}"
secret_env = "CANARY_ANTHROPIC_KEY"
header = "x-api-key"
allow = ["POST /v1/messages"]

[routes.shop]
upstream = "{shop_url}/shop"
secret_env = "CANARY_SHOP_TOKEN"
allow = ["GET /orders/", "POST /refunds"]

[tools.lookup_order]
route = "shop"
method = "GET"
path = "/orders/"
policy = "allow"
effect = "read"
description = "Look an order up"
input_schema = {SCHEMA}

[tools.refund]
route = "shop"
method = "POST"
path = "/refunds"
policy = "ask"
effect = "write"
approval_ttl = 600
description = "Refund an order"
input_schema = {SCHEMA}
""")
    return path


@dataclass
class Proxied:
    cluster: Any
    model: ScriptedModel
    shop: Upstream
    proxy: Any


@contextmanager
def proxied(make_cluster: Any, tmp_path: Path, tool_log: Path, anthropic_key: str,
            shop_token: str) -> Iterator[Proxied]:
    """A cluster whose workers have no key, a real ``wakeful proxy`` holding the two secrets,
    the scripted model and the shop as its upstreams; the proxy and the shop stop on exit."""
    shop = Upstream().start()
    proxy_url = f"http://127.0.0.1:{free_port()}"
    with ScriptedModel() as model:
        config = proxied_config(tmp_path / "agent.toml", model.base_url, shop.url)
        env = {**agent_env(config, "http://127.0.0.1:9/unused", tool_log), "WAKEFUL_PROXY_URL": proxy_url,
               "ANTHROPIC_API_KEY": ""}
        c = make_cluster(run_workers=1, env=env)
        database_url = c.store.engine.url.render_as_string(hide_password=False)
        procs = Processes({**c.env, "WAKEFUL_DATABASE_URL": database_url}, tmp_path / "proxy-logs")
        proxy = procs.start("proxy", [WAKEFUL, "proxy"], extra_env={
            "CANARY_ANTHROPIC_KEY": anthropic_key, "CANARY_SHOP_TOKEN": shop_token})
        try:
            wait_for(lambda: _healthy(proxy_url), 60, "the proxy's /healthz")
            yield Proxied(c, model, shop, proxy)
        finally:
            procs.stop_all()
            shop.stop()


def test_every_call_goes_through_the_proxy_and_no_key_leaves_it(make_cluster: Any, tmp_path: Path,
                                                                 tool_log: Path) -> None:
    anthropic_key, shop_token = "sk-ant-canary-" + secrets.token_hex(12), "shop-canary-" + secrets.token_hex(12)
    with proxied(make_cluster, tmp_path, tool_log, anthropic_key, shop_token) as setup:
        c, model, shop = setup.cluster, setup.model, setup.shop
        # an allowed read, inline, under the run's grant; then a write asked, approved, run
        c.ingest("ada", "chat", "1", {"text": 'call lookup_order {"order": 7}'})
        c.wait(lambda: any("lookup_order" in r.body for r in c.store.outbox("ada")), "the read's reply")
        c.ingest("ada", "chat", "2", {"text": 'call refund {"order": 7}\ncall refund {"order": 8}'})
        asked = c.wait(lambda: len(c.store.effects.view("ada")) == 2 and c.store.effects.view("ada"),
                       "two refunds asked")
        yes, no = sorted(asked, key=lambda e: e.input["order"])
        assert c.store.answer_approval("ada", yes.tool_use_id, "yes") == "yes"
        assert c.store.answer_approval("ada", no.tool_use_id, "no") == "no"
        c.wait(lambda: [p for p in shop.paths() if p.startswith("/shop/refunds")], "the approved refund")
        c.wait(lambda: any("refund" in r.body and "refused" in r.body.lower() for r in c.store.outbox("ada"))
               or len(model.requests) >= 5, "the model told of both answers", timeout=60)
    refunds = [r for r in shop.requests if r.path.startswith("/shop/refunds")]
    assert len(refunds) == 1 and json.loads(refunds[0].body) == {"order": 7}  # the yes, once; never the no
    assert all(r.headers.get("authorization") == f"Bearer {shop_token}" for r in shop.requests)
    assert {key for path, key in model.seen} == {anthropic_key}  # the proxy put the key on every call
    audit = c.store.grants.audit("ada")
    assert {a.route for a in audit} == {"anthropic", "shop"} and all(a.status < 400 for a in audit)
    everything = "\n".join([
        json.dumps(model.requests), json.dumps([r.body for r in c.store.outbox("ada")]),
        c.logs(tail=10**7), setup.proxy.text(),
        _redis_dump(c.broker_url),  # task results and messages, what Flower would show
        subprocess.run(["pg_dump", "-h", "127.0.0.1", "-U", "postgres", c.store.engine.url.database],
                       capture_output=True, text=True, check=True).stdout])
    assert "lookup_order" in everything  # the haystack is real
    assert anthropic_key not in everything and shop_token not in everything
    assert "CANARY_" not in c.env and not c.env.get("ANTHROPIC_API_KEY")  # the workers never had them


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _redis_dump(url: str) -> str:
    import redis

    r = redis.Redis.from_url(url)
    out = []
    for key in r.scan_iter():
        kind = r.type(key).decode()
        value = {"string": lambda: r.get(key), "hash": lambda: r.hgetall(key), "list": lambda: r.lrange(key, 0, -1),
                 "set": lambda: r.smembers(key), "zset": lambda: r.zrange(key, 0, -1)}.get(kind, lambda: b"")()
        out.append(f"{key!r} {value!r}")
    r.close()
    return "\n".join(out)


def test_a_stalled_workers_calls_through_the_proxy_are_refused_after_a_takeover(
        make_cluster: Any, tmp_path: Path, tool_log: Path) -> None:
    """A run worker SIGSTOPped inside a model call, past its lease; another worker takes the
    inbox over and runs; SIGCONT: the stalled worker's inline read and its next model call go
    through the proxy with its run's grant, which died with its generation: 403 ``fenced``,
    nothing reaches an upstream, its finish is refused."""
    import signal

    with proxied(make_cluster, tmp_path, tool_log, "sk-ant-" + secrets.token_hex(12),
                 secrets.token_hex(12)) as setup:
        c, model, shop = setup.cluster, setup.model, setup.shop
        [first] = c.run_workers
        hold = model.hold_next()
        c.ingest("bo", "chat", "1", {"text": 'call lookup_order {"order": 9}'})
        c.wait(lambda: len(model.requests) == 1, "the first worker's model call")
        c.procs.kill(first, signal.SIGSTOP)  # paused inside the model call, past its lease
        second = c.procs.worker("runs-b", ("wakeful.runs",))
        c.procs.wait_ready(second)
        c.wait(lambda: any("lookup_order" in r.body for r in c.store.outbox("bo")), "the second worker's reply")
        reads_before = [p for p in shop.paths() if p.startswith("/shop/orders")]
        model_calls_before = len(model.requests)
        hold.set()  # the stalled worker's model reply arrives: a tool use of its own
        c.procs.kill(first, signal.SIGCONT)
        c.wait(lambda: "'end': 'fenced'" in first.text(), "the stalled worker's run to end fenced", timeout=60)
    assert len(reads_before) == 1  # the second worker's read
    assert [p for p in shop.paths() if p.startswith("/shop/orders")] == reads_before  # none from the first
    assert len(model.requests) == model_calls_before  # its next model call never reached the model
    refused = [a for a in c.store.grants.audit("bo") if a.outcome == "fenced"]
    assert refused and all(a.status == 403 and a.generation == 1 for a in refused)
    assert len(c.store.operator.run_log("bo")) == 1  # one committed finish, the second worker's
