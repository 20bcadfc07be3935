"""Issue 25, part 1: an ask's approval reaches its approver, not the customer who asked.

Through real worker, control, beat and web processes on PostgreSQL and Redis, the claude
agent against the scripted Messages API: a customer's ``refund`` is routed to the operator
inbox ``ops`` (``approver = "inbox:ops"``); the customer's outbox gets a notice and never the
link, the operator's gets the signed link (made for ``inbox:ops``); the operator answers
through the web edge, the tool runs once, the customer is told the decision and then gets
the agent's reply; ``wakeful approvals`` shows who answered. A second tool's approver is a
named channel (``channel:approvers``, ``WAKEFUL_CHANNEL_APPROVERS``). The config's checks run
in process."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from wakeful.agent.config import ConfigError, load
from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env, calls
from wakeful.cli.processes import CONTROL_QUEUES, wait_for

SECRET = "approvers-test-key"
TOOLS = {
    "refund": {"call": "agent_tools:refund", "policy": "ask", "effect": "write", "approval_ttl": 600,
               "approver": "inbox:ops"},
    "wire": {"call": "agent_tools:refund", "policy": "ask", "effect": "write", "approval_ttl": 600,
             "approver": "channel:approvers"},
    "note": {"call": "agent_tools:refund", "policy": "ask", "effect": "write", "approval_ttl": 600},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _lines(path: Path, inbox: str | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [line for line in lines if inbox is None or line["inbox"] == inbox]


def test_an_approval_goes_to_the_operator_and_the_customer_is_told(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path) -> None:
    port = _free_port()
    config = write_config(TOOLS)
    cluster = make_cluster(env={**agent_env(config, model.base_url, tool_log),
                                "WAKEFUL_PUBLIC_URL": f"http://127.0.0.1:{port}",
                                "WAKEFUL_WEB_PORT": str(port)})
    approvers = cluster.home / "approvers.jsonl"
    # The key (and the named channel) go to the dispatcher and the web edge only.
    [control] = [p for p in cluster.procs.procs if p.name == "control"]
    cluster.procs.stop(control)
    keyed = {"WAKEFUL_APPROVAL_SECRET": SECRET, "WAKEFUL_CHANNEL_APPROVERS": f"jsonl:{approvers}"}
    control = cluster.procs.start("control-keyed", [
        sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO", "-n", "control2@%h",
        "-Q", ",".join(CONTROL_QUEUES), "-c", "2", "--without-mingle", "--without-gossip"], keyed)
    cluster.procs.start("web", [sys.executable, "-m", "wakeful.web"], keyed)
    cluster.procs.wait_ready(control)
    wait_for(lambda: _up(port), 30, "the web edge")

    cluster.ingest("cust", "chat", "1", {"text": 'I will refund it.\ncall refund {"order": 7}'})
    [request] = cluster.wait(lambda: [m for m in cluster.sent("ops") if m["kind"] == "approval"],
                             "the approval request in the operator's outbox")
    [item] = request["messages"]
    fields = item["fields"]
    assert (fields["inbox"], fields["tool"], fields["input"], fields["approver"]) == (
        "cust", "refund", {"order": 7}, "inbox:ops")
    assert "I will refund it." in fields["words"] and isinstance(fields["deadline"], int)
    link = fields["link"]
    assert link in request["body"] and f"http://127.0.0.1:{port}/approvals/cust/" in link
    query = parse_qs(urlsplit(link).query)
    assert query["by"] == ["inbox:ops"]

    told = cluster.wait(lambda: [m for m in cluster.sent("cust") if "waits for approval" in m["body"]],
                        "the customer's notice")
    assert told[0]["kind"] == "notice"
    assert calls(tool_log) == []

    # The operator's link is theirs: without its `by`, or with another approver, it is refused.
    token = query["token"][0]
    base = link.split("?")[0]
    for forged in ({"token": token}, {"token": token, "by": "inbox:cust"}, {"token": token, "by": "self"}):
        refused = httpx.post(base, data={"answer": "yes", **forged}, timeout=10)
        assert refused.status_code == 403 and refused.json()["error"] == "bad_token", forged
    answered = httpx.post(base, data={"answer": "yes", "token": token, "by": "inbox:ops"}, timeout=10)
    assert answered.json()["outcome"] == "yes"

    cluster.wait(lambda: [m for m in cluster.sent("cust") if "was approved" in m["body"]],
                 "the customer told what was decided")
    final = cluster.wait(lambda: [m for m in cluster.sent("cust") if "refund: refunded order 7" in m["body"]],
                         "the agent's reply after the tool ran")
    # The answer to the customer's question is a reply (not paced); it may go out merged
    # with the notice above when that notice was still held by the gap.
    [answer] = [i for i in final[0]["messages"] if "refund: refunded order 7" in i["body"]]
    assert answer["kind"] == "reply"
    assert [c["input"] for c in calls(tool_log)] == [{"order": 7}]
    for message in cluster.sent("cust"):  # the customer never saw a link, a token or a marker
        assert "/approvals/" not in message["body"] and token not in json.dumps(message)
        assert "wakeful-approval-link" not in message["body"]

    shown = subprocess.run([sys.executable, "-m", "wakeful.cli.main", "approvals", "--all", "--json"],
                           env={**os.environ, "WAKEFUL_DATABASE_URL": cluster.env["WAKEFUL_DATABASE_URL"]},
                           capture_output=True, text=True, timeout=60, check=True)
    [approval] = json.loads(shown.stdout)
    assert (approval["inbox"], approval["approver"], approval["answer"], approval["answered_by"]) == (
        "cust", "inbox:ops", "yes", "inbox:ops")
    table = subprocess.run([sys.executable, "-m", "wakeful.cli.main", "approvals", "--all"],
                           env={**os.environ, "WAKEFUL_DATABASE_URL": cluster.env["WAKEFUL_DATABASE_URL"]},
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "by" in table.splitlines()[0] and table.count("inbox:ops") == 2

    # A named channel: the request goes there, the customer still gets only the notice.
    cluster.ingest("cust2", "chat", "1", {"text": 'call wire {"order": 8}'})
    [sent] = cluster.wait(lambda: _lines(approvers), "the request through the approvers channel")
    assert sent["inbox"] == "cust2" and sent["kind"] == "approval"
    assert parse_qs(urlsplit(sent["messages"][0]["fields"]["link"]).query)["by"] == ["channel:approvers"]
    notice = cluster.wait(lambda: [m for m in cluster.sent("cust2") if "waits for approval" in m["body"]],
                          "cust2's notice")
    assert all("/approvals/" not in m["body"] for m in cluster.sent("cust2")) and notice


def test_the_approver_keys_are_checked(write_config: Any) -> None:
    config = write_config({"note": {**TOOLS["note"], "approver": "inbox:ops"}}, approver="channel:team_a")
    cfg = load(config)
    assert (cfg.approver, cfg.tools["note"].approver) == ("channel:team_a", "inbox:ops")
    assert load(write_config({"note": TOOLS["note"]})).approver == "self"
    for agent, tools, where in (
            ({"approver": "ops"}, {"note": TOOLS["note"]}, r"\[agent\]"),
            ({}, {"note": {**TOOLS["note"], "approver": "channel:two words"}}, r"\[tools\.note\]"),
            ({}, {"note": {**TOOLS["note"], "approver": 7}}, r"\[tools\.note\]")):
        with pytest.raises(ConfigError, match=rf"agent\.toml: {where}: .*approver"):
            load(write_config(tools, **agent))


def test_the_approval_token_binds_its_approver() -> None:
    from wakeful.approval_tokens import answer_token, approval_link, check_token, make_token

    ops = make_token("cust", "toolu_1", approver="inbox:ops", secret=SECRET, now=0, expires_in=60)
    own = make_token("cust", "toolu_1", secret=SECRET, now=0, expires_in=60)
    assert ops != own
    ok = {"secrets": (SECRET,), "now": 1}
    assert check_token(ops, "cust", "toolu_1", approver="inbox:ops", **ok) is None
    assert check_token(ops, "cust", "toolu_1", **ok) == "bad_token"
    assert check_token(ops, "cust", "toolu_1", approver="inbox:cust", **ok) == "bad_token"
    assert check_token(own, "cust", "toolu_1", approver="self", **ok) is None
    assert check_token(ops, "cust", "toolu_2", approver="inbox:ops", **ok) == "bad_token"
    no = answer_token(ops, "no")
    assert check_token(no, "cust", "toolu_1", approver="inbox:ops", answer="no", **ok) is None
    assert check_token(no, "cust", "toolu_1", approver="inbox:ops", answer="yes", **ok) == "bad_token"
    assert check_token(no, "cust", "toolu_1", answer="no", **ok) == "bad_token"
    link = approval_link("cust", "toolu_1", approver="inbox:ops", base_url="https://x", secret=SECRET,
                         expires_in=60)
    assert re.search(r"\?token=\d+\.[\w-]+&by=inbox%3Aops$", link)
    assert "by=" not in approval_link("cust", "toolu_1", base_url="https://x", secret=SECRET, expires_in=60)


def test_an_operators_merged_message_links_each_request_to_its_own_inbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two customers' requests, with the same tool use id, in one message to ``ops``: each
    item's link is made for its own inbox and the operator, in its fields and in its text."""
    from store import OutboxItem, OutgoingMessage
    from store.effects import LINK_MARKER
    from tasks.approval_links import linked

    from wakeful.settings import RuntimeSettings

    # The dispatcher's settings, as its process reads them at its start.
    dispatcher = RuntimeSettings.from_env({"WAKEFUL_APPROVAL_SECRET": SECRET, "WAKEFUL_PUBLIC_URL": "https://approve.example"})
    monkeypatch.setattr("tasks.approval_links.runtime_settings", lambda: dispatcher)
    items = tuple(OutboxItem(i, "approval", f"refund for {who}: {LINK_MARKER.format('toolu_same')}", True,
                             {"inbox": who, "request_id": "toolu_same", "approver": "inbox:ops"})
                  for i, who in ((1, "ann"), (2, "bob")))
    message = linked(OutgoingMessage("ops", "outbox-1", "\n\n".join(i.body for i in items), True, (1, 2),
                                     items=items))
    ann, bob = (i.fields["link"] for i in message.items)
    assert ann.startswith("https://approve.example/approvals/ann/toolu_same?token=")
    assert bob.startswith("https://approve.example/approvals/bob/toolu_same?token=")
    assert ann.endswith("&by=inbox%3Aops") and bob.endswith("&by=inbox%3Aops")
    assert message.body == f"refund for ann: {ann}\n\nrefund for bob: {bob}"
