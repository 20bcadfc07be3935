"""Each operator command against a store with known content, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable

from typer.testing import Result

from store import Store

from operator_support import Content, parsed

Wakeful = Callable[..., Result]


# -- status -----------------------------------------------------------------------------

def test_status_without_an_inbox_puts_dead_events_first(wakeful: Wakeful, content: Content) -> None:
    data = parsed(wakeful("status", "--json"))
    m = data["metrics"]
    # bob's: a chat message and the expired approval's answer
    assert (m["events_pending"], m["events_running"], m["events_dead"]) == (2, 0, 1)
    assert m["outbox_held"] == 1 and m["rejected"] == {"task:wakeful.ingest": 1}
    assert [s["inbox"] for s in data["attention"]] == ["alice", "bob"]
    assert data["attention"][0]["dead"] == 1 and data["attention"][1]["holder"] == "worker-7"
    assert data["rejected"][0]["reason"] == "payload must be a JSON object"

    text = wakeful("status")
    assert text.exit_code == 0
    out = text.stdout
    assert "2 pending, 0 running, 1 dead" in out and "1 held" in out
    lines = out.splitlines()
    alice = next(i for i, line in enumerate(lines) if line.startswith("alice "))
    bob = next(i for i, line in enumerate(lines) if line.startswith("bob "))
    assert alice < bob and "worker-7" in lines[bob]
    assert "payload must be a JSON object" in out


def test_status_of_one_inbox(wakeful: Wakeful, content: Content) -> None:
    alice = parsed(wakeful("status", "alice", "--json"))
    assert (alice["pending"], alice["running"], alice["done"], alice["dead"]) == (0, 0, 2, 1)
    assert alice["holder"] is None and alice["generation"] == 1
    assert alice["held_messages"] == 1 and alice["pending_approvals"] == 1
    assert [t["id"] for t in alice["next_timers"]] == ["tick", "approval:refund-1"]
    assert alice["next_timers"][0]["every"] == 3600

    bob = parsed(wakeful("status", "bob", "--json"))
    assert bob["holder"] == "worker-7" and bob["generation"] == 1
    assert 0 < bob["lease_expires_in"] <= 120
    assert bob["pending"] == 2 and 50 <= bob["oldest_pending_age"] <= 120

    text = wakeful("status", "bob").stdout
    assert "held by worker-7, generation 1" in text and "2 pending" in text
    text = wakeful("status", "alice").stdout
    assert "free (generation 1)" in text and "tick:" in text and "every 1h00m" in text
    assert "1 held; last send never" in text


# -- dead, requeue ----------------------------------------------------------------------

def test_dead_lists_errors_and_attempts(wakeful: Wakeful, content: Content) -> None:
    [event] = parsed(wakeful("dead", "--json"))
    assert (event["id"], event["inbox"], event["source_id"]) == (content.poison_id, "alice", "p-1")
    assert event["attempts"] == 1 and event["error"] == "ValueError: poison"
    assert parsed(wakeful("dead", "--inbox", "alice", "--json"))[0]["id"] == content.poison_id
    assert parsed(wakeful("dead", "--inbox", "bob", "--json")) == []

    out = wakeful("dead").stdout
    row = next(line for line in out.splitlines() if line.startswith(str(content.poison_id)))
    assert "alice" in row and "p-1" in row and "ValueError: poison" in row
    assert " 1 " in row  # attempts
    assert wakeful("dead", "--inbox", "bob").stdout.strip() == "no dead events"


def test_requeue_one_event_resets_attempts_and_rings(wakeful: Wakeful, content: Content,
                                                     make_store: Callable[..., Store],
                                                     rings: list[str]) -> None:
    done = wakeful("requeue", str(content.poison_id))
    assert done.exit_code == 0
    assert f"requeued event {content.poison_id} (chat/p-1) in inbox 'alice'" in done.stdout
    assert rings == ["alice"]
    event = next(e for e in make_store().events("alice") if e.id == content.poison_id)
    assert (event.status, event.attempts, event.error) == ("pending", 0, None)

    again = wakeful("requeue", str(content.poison_id))  # no longer dead
    assert again.exit_code == 1 and f"event {content.poison_id} is pending, not dead" in again.stderr
    missing = wakeful("requeue", "999999", "--json")
    assert missing.exit_code == 1 and missing.stdout.strip() == '{"error": "no event with id 999999"}'
    assert rings == ["alice"]
    # Audited as the console's actions are (the inbox's timeline shows them), newest first.
    assert [(a.actor, a.action, a.target, a.outcome) for a in make_store().console.actions("alice")] == [
        ("cli", "requeue", str(content.poison_id), "not dead: nothing requeued"),
        ("cli", "requeue", str(content.poison_id), "requeued")]


def test_requeue_an_inbox(wakeful: Wakeful, content: Content, make_store: Callable[..., Store],
                          rings: list[str]) -> None:
    data = parsed(wakeful("requeue", "--inbox", "alice", "--json"))
    assert [e["id"] for e in data["requeued"]] == [content.poison_id]
    assert data["requeued"][0]["attempts"] == 0 and data["requeued"][0]["status"] == "pending"
    assert rings == ["alice"]
    assert make_store().dead() == []
    nothing = wakeful("requeue", "--inbox", "bob")
    assert nothing.exit_code == 0 and "has no dead events: nothing requeued" in nothing.stdout
    assert rings == ["alice"]  # nothing requeued, nothing rung


def test_requeue_needs_exactly_one_target(wakeful: Wakeful, content: Content) -> None:
    for args in ((), ("1", "--inbox", "alice")):
        result = wakeful("requeue", *args)
        assert result.exit_code == 2 and "either an EVENT_ID or --inbox" in result.stderr


# -- approvals, answer ------------------------------------------------------------------

def test_approvals_pending_with_deadlines(wakeful: Wakeful, content: Content) -> None:
    [pending] = parsed(wakeful("approvals", "--json"))
    assert (pending["inbox"], pending["request_id"], pending["action"]) == ("alice", "refund-1", "refund order 1")
    assert pending["deadline"] == pending["created"] + 3600 and pending["answer"] is None
    assert parsed(wakeful("approvals", "--inbox", "bob", "--json")) == []
    everything = parsed(wakeful("approvals", "--all", "--json"))
    assert {(a["request_id"], a["answer"]) for a in everything} == {("refund-1", None), ("refund-2", "expired")}

    out = wakeful("approvals").stdout
    header, row = out.splitlines()[0], next(line for line in out.splitlines() if line.startswith("alice"))
    assert header.split() == ["inbox", "request_id", "action", "tool", "input", "requested", "deadline", "left",
                              "approver", "answer", "by"]  # a name over every column
    assert "refund-1" in row and "refund order 1" in row and "in 5" in row and "pending" in row
    assert wakeful("approvals", "--inbox", "bob").stdout.strip() == "no pending approvals"


def test_answer(wakeful: Wakeful, content: Content, rings: list[str], make_store: Callable[..., Store]) -> None:
    assert parsed(wakeful("answer", "alice", "refund-1", "yes", "--json")) == {
        "inbox": "alice", "request_id": "refund-1", "outcome": "yes"}
    assert rings == ["alice"]
    assert wakeful("answer", "alice", "refund-1", "no").stdout.strip() == "yes"  # the first stands
    late = wakeful("answer", "bob", "refund-2", "yes", "--json")
    assert late.exit_code == 0 and parsed(late)["outcome"] == "expired"
    unknown = wakeful("answer", "alice", "refund-9", "yes", "--json")
    assert unknown.exit_code == 1
    assert unknown.stdout.strip().startswith('{\n  "inbox": "alice"') and '"unknown"' in unknown.stdout
    assert "no approval 'refund-9' was requested in inbox 'alice'" in unknown.stderr
    bad = wakeful("answer", "alice", "refund-1", "maybe")
    assert bad.exit_code == 2 and "'yes' or 'no'" in bad.stderr
    assert parsed(wakeful("approvals", "--json")) == []
    # Audited, the refused "maybe" not (nothing was done or stored); answered_by stays "cli".
    assert [(a.actor, a.inbox, a.target, a.detail, a.outcome) for a in make_store().console.actions()] == [
        ("cli", "alice", "refund-9", "yes", "unknown"), ("cli", "bob", "refund-2", "yes", "expired"),
        ("cli", "alice", "refund-1", "no", "yes"), ("cli", "alice", "refund-1", "yes", "yes")]


# -- per-inbox views --------------------------------------------------------------------

def test_timers(wakeful: Wakeful, content: Content) -> None:
    rows = parsed(wakeful("timers", "--inbox", "alice", "--json"))
    assert [(t["id"], t["every"], t["done"]) for t in rows] == [
        ("tick", 3600, False), ("approval:refund-1", None, False)]
    assert content.now - 200 <= rows[0]["due"] - 600 <= content.now
    out = wakeful("timers", "--inbox", "alice").stdout
    assert out.splitlines()[0].split() == ["id", "due", "in", "repeats", "misfire", "state"]
    assert "every 1h00m" in out and "approval:refund-1" in out and "once" in out
    bob = wakeful("timers", "--inbox", "bob").stdout  # its expiry timer fired: done
    assert "approval:refund-2" in bob and "done" in bob
    assert wakeful("timers").exit_code == 2  # no store view across inboxes yet: --inbox needed


def test_outbox(wakeful: Wakeful, content: Content) -> None:
    [row] = parsed(wakeful("outbox", "--inbox", "alice", "--json"))
    assert row["body"] == "hello alice" and row["sent_at"] is None and row["urgent"] is False
    out = wakeful("outbox", "--inbox", "alice").stdout
    assert "hello alice" in out and "held" in out
    assert wakeful("outbox", "--inbox", "bob").stdout.strip() == "inbox 'bob' has no messages"


def test_events(wakeful: Wakeful, content: Content) -> None:
    rows = parsed(wakeful("events", "--inbox", "alice", "--json"))
    assert [(e["source_id"], e["status"]) for e in rows] == [("m-1", "done"), ("m-2", "done"), ("p-1", "dead")]
    [dead] = parsed(wakeful("events", "--inbox", "alice", "--status", "dead", "--json"))
    assert dead["id"] == content.poison_id and dead["error"] == "ValueError: poison"
    assert "p-1" in wakeful("events", "--inbox", "alice", "-s", "dead").stdout
    assert wakeful("events", "--inbox", "bob", "--status", "running").stdout.strip() == \
        "inbox 'bob' has no running events"
    bad = wakeful("events", "--inbox", "alice", "--status", "lost")
    assert bad.exit_code == 2 and "--status must be one of" in bad.stderr


def test_runs(wakeful: Wakeful, content: Content) -> None:
    rows = parsed(wakeful("runs", "--inbox", "alice", "--json"))
    assert [(r["generation"], r["holder"], r["outcome"], r["event_ids"]) for r in rows] == [
        (1, "worker-1", "done", content.done_ids), (1, "worker-1", "error", [content.poison_id])]
    assert rows[1]["error"] == "ValueError: poison"
    assert rows[0]["started"] == content.now - 200 and rows[0]["finished"] == content.now - 190
    out = wakeful("runs", "--inbox", "alice").stdout
    assert "worker-1" in out and "10s" in out and "ValueError: poison" in out
    assert wakeful("runs", "--inbox", "bob").stdout.strip() == "inbox 'bob' has no runs on record"


# -- across inboxes ---------------------------------------------------------------------

def test_rejected(wakeful: Wakeful, content: Content) -> None:
    [row] = parsed(wakeful("rejected", "--json"))
    assert (row["origin"], row["inbox"], row["source_id"]) == ("task:wakeful.ingest", "carol", "c-1")
    assert row["reason"] == "payload must be a JSON object"
    out = wakeful("rejected").stdout
    assert "carol" in out and "payload must be a JSON object" in out


def test_incidents(wakeful: Wakeful, content: Content) -> None:
    data = parsed(wakeful("incidents", "--json"))
    assert [e["id"] for e in data["dead"]] == [content.poison_id]
    assert [e["source_id"] for e in data["expired_approvals"]] == ["refund-2"]
    out = wakeful("incidents").stdout
    assert "1 event(s) parked dead" in out and "refund-2 (refund order 2)" in out


# -- unknown inboxes, empty stores ------------------------------------------------------

UNKNOWN_INBOX = [
    ("status", "nobody"), ("dead", "--inbox", "nobody"), ("requeue", "--inbox", "nobody"),
    ("approvals", "--inbox", "nobody"), ("timers", "--inbox", "nobody"),
    ("outbox", "--inbox", "nobody"), ("events", "--inbox", "nobody"), ("runs", "--inbox", "nobody"),
]


def test_unknown_inbox_is_a_clear_error(wakeful: Wakeful, content: Content, rings: list[str]) -> None:
    for args in UNKNOWN_INBOX:
        result = wakeful(*args)
        assert result.exit_code == 1 and result.stdout == "", args
        assert "unknown inbox 'nobody'" in result.stderr, args
        as_json = wakeful(*args, "--json")
        assert as_json.exit_code == 1, args
        assert "unknown inbox 'nobody'" in json.loads(as_json.stdout)["error"], args
    assert rings == []


def test_every_command_on_an_empty_store(wakeful: Wakeful) -> None:
    data = parsed(wakeful("status", "--json"))
    assert data["attention"] == [] and data["metrics"]["events_dead"] == 0
    assert "no inbox needs attention" in wakeful("status").stdout
    for command, empty in (("dead", "no dead events"), ("approvals", "no pending approvals"),
                           ("rejected", "no rejected input")):
        assert parsed(wakeful(command, "--json")) == []
        assert wakeful(command).stdout.strip() == empty
    assert parsed(wakeful("incidents", "--json")) == {"dead": [], "expired_approvals": [], "outages": [],
                                                   "budgets": []}
    assert "nothing went wrong" in wakeful("incidents").stdout
    assert wakeful("status", "alice").exit_code == 1
    assert wakeful("requeue", "1").exit_code == 1
    assert wakeful("answer", "alice", "r", "yes").exit_code == 1
