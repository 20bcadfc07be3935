"""Issue 25, part 2, through the processes: the webhook channel gets each message's kind and an
approval's fields as JSON, and a reply to the person goes out inside the outbox gap while a
notice written in the same gap is held.

The claude agent (real worker, control and beat on PostgreSQL and Redis, the scripted
Messages API) with ``WAKEFUL_OUTBOX_GAP=3600``: a webhook's event (``github``, a third party)
makes a notice; the first goes out, the second is held; the person's ``chat`` message then
gets its reply at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wakeful.agent.scripted import ScriptedModel
from agent_support import agent_env

TOOLS = {"note": {"call": "agent_tools:refund", "policy": "ask", "effect": "write", "approval_ttl": 600}}


class _Hook(BaseHTTPRequestHandler):
    deliveries: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).deliveries.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, Any]]:
    handler = type("Hook", (_Hook,), {"deliveries": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/outbox", handler
    server.shutdown()
    server.server_close()


def test_a_reply_is_sent_in_the_gap_a_notice_held_and_the_kinds_reach_the_webhook(
        make_cluster: Any, write_config: Any, model: ScriptedModel, tool_log: Path,
        receiver: tuple[str, Any]) -> None:
    url, hook = receiver
    config = write_config(TOOLS)
    cluster = make_cluster(env={**agent_env(config, model.base_url, tool_log), "WAKEFUL_OUTBOX_CHANNEL": url,
                                "WAKEFUL_OUTBOX_GAP": "3600", "WAKEFUL_APPROVAL_SECRET": "kinds-test-key",
                                "WAKEFUL_PUBLIC_URL": "https://approve.example"})

    def delivered(text: str) -> list[dict[str, Any]]:
        return [d for d in hook.deliveries if text in d["body"]]

    cluster.ingest("pat", "github", "1", {"text": "push to main"})
    [first] = cluster.wait(lambda: delivered("push to main"), "the first notice (the gap was open)")
    assert first["kind"] == "notice" and [m["kind"] for m in first["messages"]] == ["notice"]

    cluster.ingest("pat", "github", "2", {"text": "another push"})
    cluster.wait(lambda: [r for r in cluster.store.outbox("pat") if "another push" in r.body],
                 "the second notice written")
    cluster.ingest("pat", "chat", "1", {"text": "hello there"})
    [answer] = cluster.wait(lambda: delivered("hello there"), "the reply, inside the gap")
    assert answer["kind"] == "reply" and "another push" not in answer["body"]
    [held] = [r for r in cluster.store.outbox("pat") if "another push" in r.body]
    assert (held.kind, held.sent_at) == ("notice", None)  # still held: the gap is an hour
    assert not delivered("another push")

    # An approval request (urgent: it carries the held notice with it) with its fields.
    cluster.ingest("pat", "chat", "2", {"text": 'Noting it.\ncall note {"order": 3}'})
    [asked] = cluster.wait(lambda: [d for d in hook.deliveries if d["kind"] in ("approval", "mixed")],
                           "the approval request")
    assert asked["kind"] == "mixed" and asked["urgent"] is True
    [approval] = [m for m in asked["messages"] if m["kind"] == "approval"]
    fields = approval["fields"]
    assert (fields["inbox"], fields["tool"], fields["input"], fields["approver"]) == ("pat", "note", {"order": 3}, "self")
    assert "Noting it." in fields["words"] and fields["deadline"] > 0
    assert fields["link"].startswith("https://approve.example/approvals/pat/") and fields["link"] in approval["body"]
    assert [m["kind"] for m in asked["messages"]] == ["approval", "notice"]  # urgent first
    assert "another push" in asked["messages"][1]["body"]


def test_the_log_channel_line_names_the_kind_and_the_approval(caplog: pytest.LogCaptureFixture) -> None:
    from store import OutboxItem, OutgoingMessage
    from tasks.channels.log import LogChannel

    fields = {"inbox": "pat", "request_id": "toolu_1", "tool": "note", "input": {"order": "\x1b[2J3"},
              "words": "w", "why": "", "deadline": 0, "approver": "inbox:ops"}
    message = OutgoingMessage("ops", "outbox-1", "Approval needed", True, (1,),
                              items=(OutboxItem(1, "approval", "Approval needed", True, fields),))
    with caplog.at_level("INFO", logger="wakeful.outbox"):
        LogChannel()(message)
    [line] = caplog.messages
    assert "kind=approval" in line and "approval=pat/toolu_1 tool=note" in line
    assert "deadline=1970-01-01T00:00:00Z approver=inbox:ops" in line
    assert "\x1b" not in line  # the model's input is escaped on the line
