"""The runtime through real worker and beat processes, on both backends.

Every test starts its own processes (see conftest.py) and plays one rule of the article
through them, then counts what happened in the store. Waiting with a timeout for something
to happen is the only use of time here; nothing asserts how fast it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import signal

from wakeful.cli.processes import holder_pid, pgid_of

pytestmark = pytest.mark.processes

PLAIN_CLIENT = r"""
import json, sys
from celery import Celery

broker, backend = sys.argv[1], sys.argv[2]
if broker.startswith("sqla+"):
    from kombu.transport import sqlalchemy
    sqlalchemy.Transport.polling_interval = 0.05
app = Celery("another-service", broker=broker, backend=backend)
app.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
kw = {"inbox": "alice", "source": "github", "source_id": "delivery-1", "payload": {"text": "PR opened"}}
results = [app.send_task("wakeful.ingest", kwargs=kw, ignore_result=False).get(timeout=30, interval=0.05)
           for _ in range(3)]
bad = app.send_task("wakeful.ingest", kwargs={"inbox": "alice", "source": "github",
                    "source_id": "delivery-2", "payload": "not an object"},
                    ignore_result=False).get(timeout=30, interval=0.05)
odd = app.send_task("wakeful.ingest", kwargs={"inbox": "alice", "source": "github",
                    "payload": {}, "sauce": "x"}, ignore_result=False).get(timeout=30, interval=0.05)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tasks", "store", "wakeful", "beat_schedule"))
print(json.dumps({"results": results, "bad": bad, "odd": odd, "wakeful_modules": loaded}))
"""


def test_plain_client_send_task_stores_once_and_runs_once(make_cluster, tmp_path: Path) -> None:
    c = make_cluster()
    out = subprocess.run([sys.executable, "-c", PLAIN_CLIENT, c.broker_url, c.result_url],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + c.logs()
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["wakeful_modules"] == []  # the caller needs nothing from wakeful
    assert answer["results"] == [{"stored": True}, {"stored": False, "duplicate": True},
                                 {"stored": False, "duplicate": True}]
    assert "payload must be a JSON object" in answer["bad"]["rejected"]
    assert "unexpected arguments: sauce" in answer["odd"]["rejected"]
    reasons = [r.reason for r in c.store.operator.rejections()]
    assert any("payload must be a JSON object" in r for r in reasons)
    assert any("sauce" in r for r in reasons)

    # A later event in the same inbox runs after the duplicates were handled: the first
    # event was done exactly once.
    c.wait(lambda: c.settled("alice", 1), "alice's event done")
    c.ingest("alice", "chat", "later", {"text": "and another thing"})
    c.wait(lambda: c.settled("alice", 2), "the later event done")
    events = c.store.events("alice")
    assert len(events) == 2
    first = events[0]
    assert (first.status, first.attempts) == ("done", 1)
    runs_with_first = [r for r in c.store.operator.run_log("alice") if first.id in r.event_ids]
    assert len(runs_with_first) == 1 and runs_with_first[0].outcome == "done"


def test_burst_is_one_batch(make_cluster) -> None:
    c = make_cluster()
    c.ingest("bob", "chat", "m-0", {"text": "summarise my inbox", "work": 1.5})
    c.wait(lambda: c.store.status("bob").holder, "bob's first run to start")
    for i, text in enumerate(["deploy it?", "actually wait", "ok go"], start=1):
        c.ingest("bob", "chat", f"m-{i}", {"text": text})
    c.wait(lambda: c.settled("bob", 4), "bob's four events")
    runs = c.store.operator.run_log("bob")
    assert [len(r.event_ids) for r in runs] == [1, 3]
    assert all(r.outcome == "done" for r in runs)
    # One reply for the batch. (Two ingests in flight at once may commit in either order:
    # events are ordered by arrival in the store, not by when the caller sent them.)
    body = c.store.outbox("bob")[-1].body
    assert body.startswith("3 things: ")
    assert sorted(body.removeprefix("3 things: ").split(" | ")) == [
        "actually wait", "deploy it?", "ok go"]


def test_poison_goes_dead_and_its_neighbour_is_done(make_cluster) -> None:
    c = make_cluster()
    c.ingest("carol", "chat", "c-0", {"text": "warming up", "work": 1.0, "silent": True})
    c.wait(lambda: c.store.status("carol").holder, "carol's first run to start")
    c.ingest("carol", "webhook", "poison", {"fail": "context overflow"})
    c.ingest("carol", "chat", "healthy", {"text": "what's on today?"})
    c.wait(lambda: c.settled("carol", 3), "carol's events settled", timeout=45)
    by_key = {e.source_id: e for e in c.store.events("carol")}
    poison, healthy = by_key["poison"], by_key["healthy"]
    assert (poison.status, poison.attempts) == ("dead", 3)
    assert "context overflow" in (poison.error or "")
    assert healthy.status == "done"
    runs = c.store.operator.run_log("carol")
    with_poison = [r for r in runs if poison.id in r.event_ids]
    assert len(with_poison) == 3 and all(r.outcome == "error" for r in with_poison)
    assert all(r.event_ids == (poison.id,) for r in with_poison[1:])  # retried alone
    assert [e.source_id for e in c.store.dead("carol")] == ["poison"]


def test_recurring_timer_fires_through_beat(make_cluster) -> None:
    c = make_cluster()
    c.ingest("erin", "chat", "e-1", {"text": "check the build", "every": 1,
                                      "timer_id": "build", "silent": True})

    def ticks():
        done = [e for e in c.store.events("erin") if e.source == "timer" and e.status == "done"]
        return done if len(done) >= 2 else None

    fired = c.wait(ticks, "two timer ticks")
    assert c.store.cancel_timer("erin", "build")
    keys = [e.source_id for e in fired]
    assert len(set(keys)) == len(keys) and all(k.startswith("build@") for k in keys)
    assert all(e.attempts == 1 and "scheduled_for" in e.payload for e in fired)
    bodies = [m.body for m in c.store.outbox("erin")]
    assert any("check the build (scheduled" in b for b in bodies)


def test_unanswered_approval_resumes_the_agent_as_expired(make_cluster) -> None:
    from wakeful.approval_tokens import answer_token, make_token  # an answer by task carries its own token

    def token(request_id: str) -> str:
        return answer_token(make_token("frank", request_id, secret="runtime-approval-secret", expires_in=3600), "yes")

    c = make_cluster(env={"WAKEFUL_APPROVAL_SECRET": "runtime-approval-secret"})
    c.ingest("frank", "chat", "f-1", {"text": "refund order 881?", "approval": {
        "id": "refund-881", "action": "refund order 881", "expires_in": 1}})

    def expiry():
        return [e for e in c.store.events("frank")
                if e.source == "approval" and e.status == "done"]

    [event] = c.wait(expiry, "the approval's expiry to resume the agent")
    assert event.source_id == "refund-881" and event.payload["answer"] == "expired"
    late = c.send("wakeful.answer_approval", want_result=True, inbox="frank", request_id="refund-881",
                  answer="yes", token=token("refund-881"))
    assert late == {"outcome": "expired"}
    never = c.send("wakeful.answer_approval", want_result=True, inbox="frank", request_id="refund-999",
                   answer="yes", token=token("refund-999"))
    assert never == {"outcome": "unknown"}
    assert any("nobody answered in time" in m.body for m in c.store.outbox("frank"))
    assert len([e for e in c.store.events("frank") if e.source == "approval"]) == 1


class _Receiver(BaseHTTPRequestHandler):
    """A webhook receiver that refuses the very first delivery (503) to make the channel retry."""

    deliveries: list[dict] = []
    refused_once = False

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if not cls.refused_once:
            cls.refused_once = True
            self.send_response(503)
            self.end_headers()
            return
        import time

        cls.deliveries.append({"key": self.headers["Idempotency-Key"], "body": body,
                               "at": time.time()})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver():
    handler = type("Receiver", (_Receiver,), {"deliveries": [], "refused_once": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


def test_outbox_gap_holds_and_merges_through_the_webhook_channel(make_cluster, receiver) -> None:
    url, handler = receiver
    gap = 3
    c = make_cluster(env={"WAKEFUL_OUTBOX_CHANNEL": url, "WAKEFUL_OUTBOX_GAP": str(gap)})
    c.ingest("gina", "chat", "u-0", {"text": "update 0"})
    # The first message after a quiet spell goes out right after its run, not at a tick.
    c.wait(lambda: handler.deliveries, "the first send")
    for i in (1, 2):
        c.ingest("gina", "chat", f"u-{i}", {"text": f"update {i}"})
        c.wait(lambda i=i: c.settled("gina", i + 1), f"update {i} done")
    c.wait(lambda: len({d["key"] for d in handler.deliveries}) >= 2, "two sends")
    sends = {}
    for d in handler.deliveries:  # at-least-once: a resend carries the same key
        sends.setdefault(d["key"], d)
    first, second = list(sends.values())[:2]
    assert first["body"]["body"] == "update 0"
    assert second["body"]["body"] == "update 1\n\nupdate 2"
    assert all(d["key"] == d["body"]["key"] for d in handler.deliveries)
    # The gap held: the merged send waited for it (clock seconds are whole, hence the -1).
    assert second["at"] - first["at"] >= gap - 1
    rows = c.wait(lambda: [r for r in c.store.outbox("gina") if r.sent_at is not None][2:] and
                  c.store.outbox("gina"), "the store to record the sends")
    assert len(rows) == 3
    assert len({r.dispatch_key for r in rows}) == 2


def test_worker_killed_mid_run_another_worker_finishes_with_attempts_2(make_cluster) -> None:
    c = make_cluster(run_workers=2)
    c.ingest("dave", "chat", "d-1", {"text": "draft the weekly report", "slow_first_attempt": 60})
    holder = c.wait(lambda: c.store.status("dave").holder, "dave's run to start")
    pid = holder_pid(holder)
    [victim] = [w for w in c.run_workers if pid is not None and pgid_of(pid) == w.pid]
    [survivor] = [w for w in c.run_workers if w is not victim]
    first_generation = c.store.status("dave").generation
    c.procs.kill(victim)  # SIGKILL to the worker's main process and its pool child
    c.wait(lambda: c.settled("dave", 1), "dave's event finished by the other worker", timeout=45)
    [event] = c.store.events("dave")
    assert (event.status, event.attempts) == ("done", 2)
    [run] = c.store.operator.run_log("dave")
    assert run.generation > first_generation
    assert holder_pid(run.holder) != pid
    assert pgid_of(holder_pid(run.holder)) == survivor.pid
    assert len(c.store.outbox("dave")) == 1
    assert c.store.operator.counters()["lease_takeovers"] == 1  # counted on dave's own row


def test_sweep_rings_lost_doorbells_and_extra_doorbells_cost_nothing(make_cluster) -> None:
    c = make_cluster()
    # Stored but never rung (as if the broker lost the doorbell): the sweep rings it.
    assert c.store.ingest("lost", "chat", "x-1", {"text": "anyone there?"})
    c.wait(lambda: c.settled("lost", 1), "the sweep to ring the lost doorbell")
    # Five doorbells for one event (a broker redelivery, two beats ...): one run.
    assert c.store.ingest("rung", "chat", "y-1", {"text": "hello"})
    for _ in range(5):
        c.client.send_task("wakeful.run_inbox", args=["rung"], queue="wakeful.runs")
    c.wait(lambda: c.settled("rung", 1), "the rung event done")
    c.ingest("rung", "chat", "y-2", {"text": "sentinel"})
    c.wait(lambda: c.settled("rung", 2), "the sentinel done")
    [first, _] = c.store.events("rung")
    assert first.attempts == 1
    assert len([r for r in c.store.operator.run_log("rung") if first.id in r.event_ids]) == 1
    assert all(r.event_ids for r in c.store.operator.run_log("rung"))  # no empty runs were recorded

    # Retention through the task: nothing is old enough to go, and on the embedded broker the
    # consumed messages kombu never deletes are pruned.
    purged = c.send("wakeful.purge", want_result=True)
    assert purged["events"] == 0
    if c.backend == "embedded":
        assert purged["broker_messages"] > 0


def test_a_paused_worker_that_wakes_after_a_takeover_changes_nothing(make_cluster, backend: str) -> None:
    # On the embedded broker one SQLite file is every process's queue, with one writer at a
    # time: a whole worker paused inside a broker transaction would stall the others too. So
    # there the paused process is the one running the agent (a prefork child, which never
    # touches the broker mid-run); with Redis it is the whole worker (a laptop lid, a VM pause).
    embedded = backend == "embedded"
    c = make_cluster(run_workers=2, run_slots=1 if embedded else 20)
    c.ingest("hal", "chat", "h-1", {"text": "tell the customer", "slow_first_attempt": 1})
    holder = c.wait(lambda: c.store.status("hal").holder, "hal's run to start")
    pid = holder_pid(holder)
    [stalled] = [w for w in c.run_workers if pid is not None and pgid_of(pid) == w.pid]
    pause = (lambda sig: os.kill(pid, sig)) if embedded else (lambda sig: c.procs.kill(stalled, sig))
    pause(signal.SIGSTOP)
    try:
        c.wait(lambda: c.settled("hal", 1), "the other worker to take over and finish")
    finally:
        pause(signal.SIGCONT)
    c.wait(lambda: c.store.operator.counters()["stale_finishes_refused"] >= 1,
           "the woken worker's finish to be refused")
    [event] = c.store.events("hal")
    assert (event.status, event.attempts) == ("done", 2)
    [run] = c.store.operator.run_log("hal")  # one committed finish, by the new holder
    assert holder_pid(run.holder) != pid
    assert len(c.store.outbox("hal")) == 1  # one reply, not two


def test_two_beats_never_fire_one_occurrence_twice(make_cluster) -> None:
    c = make_cluster()
    second = c.procs.beat("beat2")
    c.procs.wait_ready(second)
    c.ingest("ida", "chat", "i-1", {"text": "tick", "every": 1, "timer_id": "t", "silent": True})

    def ticks():
        done = [e for e in c.store.events("ida") if e.source == "timer" and e.status == "done"]
        return done if len(done) >= 3 else None

    c.wait(ticks, "three ticks with two beats running")
    c.store.cancel_timer("ida", "t")
    fired = [e for e in c.store.events("ida") if e.source == "timer"]
    scheduled = [e.payload["scheduled_for"] for e in fired]
    assert len(scheduled) == len(set(scheduled))  # each occurrence once
    assert all(e.attempts == 1 for e in fired if e.status == "done")
    # Both beats really were ticking the scan.
    for beat in [p for p in c.procs.procs if "beat" in p.name]:
        assert "wakeful.scan_timers" in beat.text()


RUNTIME_TESTS = str(Path(__file__).resolve().parent)


@pytest.mark.parametrize("backend", ["embedded"])
def test_an_outcome_the_store_refuses_fails_the_run_and_reaches_dead(make_cluster) -> None:
    c = make_cluster(env={"WAKEFUL_AGENT": "runtime_agents:invalid_outcome",
                          "PYTHONPATH": RUNTIME_TESTS})
    c.ingest("joe", "chat", "j-1", {"text": "hi"})
    c.wait(lambda: c.settled("joe", 1), "the event to reach dead", timeout=45)
    [event] = c.store.events("joe")
    assert (event.status, event.attempts) == ("dead", 3)
    assert "invalid outcome" in event.error and "must return an Outcome" in event.error
    assert c.store.outbox("joe") == []


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_broken_agent_setting_claims_nothing(make_cluster) -> None:
    c = make_cluster(env={"WAKEFUL_AGENT": "no_such_module:agent"})
    c.ingest("kim", "chat", "k-1", {"text": "hi"})
    runs = c.procs.procs[0]
    # A dense worker also says so once at start (the agent is loaded then): wait for the task.
    c.wait(lambda: any("wakeful.run_inbox" in line and "No module named 'no_such_module'" in line
                       for line in runs.text().splitlines()), "the run task to fail")
    [event] = c.store.events("kim")
    assert (event.status, event.attempts) == ("pending", 0)  # no attempt burned


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_busy_inbox_is_handed_back_after_the_bound_on_runs_per_task(make_cluster) -> None:
    c = make_cluster(env={"WAKEFUL_MAX_RUNS_PER_TASK": "1"})
    c.ingest("lea", "chat", "l-0", {"text": "long one", "work": 1.0})
    c.wait(lambda: c.store.status("lea").holder, "lea's first run to start")
    for i in (1, 2, 3):
        c.ingest("lea", "chat", f"l-{i}", {"text": f"quick {i}"})
    c.wait(lambda: c.settled("lea", 4), "lea's events done")
    runs = c.store.operator.run_log("lea")
    assert [len(r.event_ids) for r in runs] == [1, 3]
    # The first task stopped after its one run and handed the inbox back with work left;
    # a new task (a new holder, the next generation) took the batch.
    assert runs[1].generation == runs[0].generation + 1
    assert runs[1].holder != runs[0].holder
    assert all(e.attempts == 1 for e in c.store.events("lea"))  # no attempt burned by the hand-back


@pytest.mark.parametrize("backend", [pytest.param("redis_pg", marks=[pytest.mark.postgres,
                                                                     pytest.mark.redis])])
def test_dropped_database_connections_cost_nothing(make_cluster) -> None:
    c = make_cluster()
    c.ingest("max", "chat", "x-1", {"text": "before"})
    c.wait(lambda: c.settled("max", 1), "the first event")
    # Every connection the workers hold is cut, as by a PostgreSQL restart or a failover.
    from sqlalchemy import text

    database = c.store.engine.url.database
    with c.store.engine.connect() as conn:
        cut = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": database}).scalar()
        conn.commit()
    assert cut >= 1
    c.ingest("max", "chat", "x-2", {"text": "after"})
    c.wait(lambda: c.settled("max", 2), "the event after the cut")
    # And cut while a run is in progress: its heartbeats and finish get fresh connections.
    c.ingest("max", "chat", "x-3", {"text": "during", "work": 1.0})
    c.wait(lambda: c.store.status("max").holder, "the long run to start")
    with c.store.engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": database})
        conn.commit()
    c.wait(lambda: c.settled("max", 3), "the event whose run outlived the cut")
    assert [(e.status, e.attempts) for e in c.store.events("max")] == [("done", 1)] * 3


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_run_past_its_time_limit_fails_and_backs_off(make_cluster) -> None:
    c = make_cluster(env={"WAKEFUL_RUN_TIME_LIMIT": "1", "WAKEFUL_MAX_ATTEMPTS": "2"})
    c.ingest("pat", "chat", "p-1", {"text": "endless", "work": 30})
    c.wait(lambda: c.settled("pat", 1), "the endless event to reach dead", timeout=60)
    [event] = c.store.events("pat")
    assert (event.status, event.attempts) == ("dead", 2)
    # Ended by the runtime at the deadline (its lease keeper), or by Celery's soft limit in a
    # prefork worker, whichever comes first: both fail the run.
    assert "WAKEFUL_RUN_TIME_LIMIT" in event.error or "SoftTimeLimitExceeded" in event.error
    assert [r.outcome for r in c.store.operator.run_log("pat")] == ["error"] * 2
