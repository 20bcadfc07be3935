"""The tool kit's loops and hand-written agents hosted by real worker, control and beat
processes on PostgreSQL and Redis (the runtime tests' cluster): ask -> yes -> the write runs
exactly once for the custom loop (wakeful/examples/custom_loop.py) and the Pydantic AI one
(wakeful/examples/pydantic_ai_loop.py); the executor runs any agent's effect; an effect no configured
tool can run fails the run as an invalid outcome with nothing of it stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_support import agent_env, calls

LOOPS = ["wakeful.examples.custom_loop:agent", "wakeful.examples.pydantic_ai_loop:agent"]


def _start(make_cluster: Any, write_config: Any, tool_log: Path, agent: str) -> Any:
    env = agent_env(write_config(effect_timeout=3), "http://127.0.0.1:9", tool_log)
    env["WAKEFUL_AGENT"] = agent
    return make_cluster(env=env)


def _executions(tool_log: Path, inbox: str) -> list[dict[str, Any]]:
    return [c for c in calls(tool_log) if c["inbox"] == inbox]


def _said(cluster: Any, inbox: str, text: str) -> list[str]:
    return cluster.wait(lambda: [r.body for r in cluster.store.outbox(inbox) if text in r.body],
                        f"{inbox}: a message with {text!r}")


@pytest.mark.parametrize("agent", LOOPS)
def test_a_kit_loop_asks_and_on_yes_the_write_runs_once(make_cluster: Any, write_config: Any,
                                                        tool_log: Path, agent: str) -> None:
    cluster = _start(make_cluster, write_config, tool_log, agent)
    cluster.ingest("ask", "chat", "1", {"text": 'call refund_asked {"order": 5}'})
    [asked] = cluster.wait(lambda: cluster.store.effects.view("ask"), "ask: the asked effect")
    assert asked.status == "asked" and asked.tool == "refund_asked"
    _said(cluster, "ask", "Approval needed")
    assert _executions(tool_log, "ask") == []
    assert cluster.store.answer_approval("ask", asked.tool_use_id, "yes") == "yes"
    _said(cluster, "ask", "refunded order 5")  # the loop read the result back in its next run
    assert [c["input"] for c in _executions(tool_log, "ask")] == [{"order": 5}]
    cluster.wait(lambda: cluster.store.effects.view("ask")[0].status == "done", "ask: the effect done")
    cluster.ingest("ask", "chat", "2", {"text": "anything else?"})  # another wake: never twice
    cluster.wait(lambda: cluster.settled("ask", 4), "ask: every event settled")
    assert len(_executions(tool_log, "ask")) == 1


def test_the_executor_runs_a_hand_written_agents_effect(make_cluster: Any, write_config: Any,
                                                         tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log, "toolkit_agents:hand_written")
    cluster.ingest("hand", "chat", "1", {"text": "8"})
    _said(cluster, "hand", "result: refunded order 8")
    assert [(c["tool"], c["input"]) for c in _executions(tool_log, "hand")] == [("refund", {"order": 8})]
    [effect] = cluster.store.effects.view("hand")
    assert effect.status == "done"


def test_an_effect_no_configured_tool_runs_fails_the_run_and_stores_nothing(
        make_cluster: Any, write_config: Any, tool_log: Path) -> None:
    cluster = _start(make_cluster, write_config, tool_log, "toolkit_agents:unrunnable")
    cluster.ingest("moon", "chat", "1", {"text": "go"})
    [dead] = cluster.wait(lambda: cluster.store.dead("moon"), "moon: the event dead at the attempt cap",
                          timeout=60)
    assert dead.attempts == 3  # counted like any agent error (WAKEFUL_MAX_ATTEMPTS in the cluster)
    runs = cluster.store.operator.run_log("moon")
    assert runs and all(r.outcome == "error" for r in runs)
    assert all(r.error and r.error.startswith("invalid outcome: no configured tool can run the effect(s) "
                                              "of 'launch'") for r in runs), runs[0].error
    assert cluster.store.effects.view("moon") == []
    assert cluster.store.outbox("moon") == [] and "tried" not in cluster.store.runs.memory("moon")


def test_a_kit_loops_http_tools_go_through_the_proxy_under_its_grants(make_cluster: Any, tmp_path: Path,
                                                                       tool_log: Path) -> None:
    """The custom loop with the claude agent's proxy setup (tests/agent/test_agent_through_proxy.py):
    workers without the shop's token, an HTTP read inline under the run's grant, an HTTP write
    asked, approved and received by the shop exactly once under its effect's grant."""
    import secrets

    from test_agent_through_proxy import proxied

    def custom_loop_cluster(**kwargs: Any) -> Any:
        kwargs["env"] = {**kwargs["env"], "WAKEFUL_AGENT": "wakeful.examples.custom_loop:agent"}
        return make_cluster(**kwargs)

    token = "shop-canary-" + secrets.token_hex(12)
    with proxied(custom_loop_cluster, tmp_path, tool_log, "sk-ant-" + secrets.token_hex(12), token) as setup:
        c, shop = setup.cluster, setup.shop
        c.ingest("ada", "chat", "1", {"text": 'call lookup_order {"order": 7}'})
        [said] = _said(c, "ada", "lookup_order: ")
        assert "<untrusted" not in said  # the wrapper the model read is not what the person reads
        c.ingest("ada", "chat", "2", {"text": 'call refund {"order": 7}'})
        [asked] = c.wait(lambda: c.store.effects.view("ada"), "the refund asked")
        assert asked.status == "asked" and not [p for p in shop.paths() if p.startswith("/shop/refunds")]
        assert c.store.answer_approval("ada", asked.tool_use_id, "yes") == "yes"
        c.wait(lambda: [r.body for r in c.store.outbox("ada") if "refund: " in r.body  # the shop's answer read back
                        and "waiting for your yes" not in r.body], "the refund's result said")
        c.ingest("ada", "chat", "3", {"text": "thanks"})
        c.wait(lambda: c.settled("ada", 5), "every event settled")
    refunds = [r for r in shop.requests if r.path.startswith("/shop/refunds")]
    assert len(refunds) == 1 and refunds[0].headers.get("authorization") == f"Bearer {token}"
    assert [p for p in shop.paths() if p.startswith("/shop/orders")] == ["/shop/orders/"]
    assert {a.route for a in c.store.grants.audit("ada")} == {"shop"}  # the loop never called a model
    assert token not in c.logs(tail=10**7) and "CANARY_" not in c.env
