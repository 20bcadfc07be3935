"""The fault scenarios of issue 4, as plain functions shared by CI and the soak.

Each takes a ``make_stack(**env)`` (a fresh ``Stack`` on its own PostgreSQL database and
Redis), a random generator and a ``scale`` (1 = the short CI version), plays its faults
against real processes, waits for the system to drain, and returns a ``Result``: the
checker's counts, what the scenario injected, and what it measured. The caller asserts
(CI) or tabulates (soak). Waiting with a timeout is the only use of time; nothing here
judges speed.
"""

from __future__ import annotations

import random
import signal
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import create_engine, select, text

from store.tables import events as events_table

from harness import LIBFAKETIME, Stack, faketime_prefix  # type: ignore[import-not-found]
from agent_scenario import agent_tools  # type: ignore[import-not-found]  # noqa: E402
from dense_scenario import dense_worker_faults  # type: ignore[import-not-found]  # noqa: E402

MakeStack = Callable[..., Stack]
RUN_POINTS = ("after_claim", "before_finish_commit", "after_finish_commit")
CONTROL_POINTS = ("after_send_before_mark", "during_scan")


@dataclass
class Result:
    counts: dict[str, int]
    injected: dict[str, int] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)  # counts that may be non-zero

    def violations(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if v != self.expected.get(k, 0)}


def _items(inboxes: list[str], per_inbox: int, tag: str, say_every: int = 0) -> list[tuple]:
    out = []
    for n in range(per_inbox):
        for inbox in inboxes:
            payload: dict[str, Any] = {"n": n}
            if say_every and n % say_every == 0:
                payload["say"] = f"{inbox} {tag} {n}"
            out.append((inbox, "load", f"{tag}-{n}", payload))
    return out


def _drain(s: Stack, timeout: float, what: str = "everything settled") -> None:
    s.wait(s.settled, what, timeout=timeout)
    s.wait(s.outbox_drained, "every held message sent", timeout=timeout)


# --- 1. SIGKILL at each fault point during a load -------------------------------------------
def kill_at_points(make_stack: MakeStack, rng: random.Random, scale: int = 1,
                   points: tuple[str, ...] = RUN_POINTS + CONTROL_POINTS) -> Result:
    s = make_stack()
    inboxes = [f"k{i}" for i in range(12 * scale)]
    healthy = s.worker("runs-healthy")
    control = s.control()
    beat = s.beat()
    s.ready(healthy, control, beat)
    for i, inbox in enumerate(inboxes[:3]):
        s.store.add_timer(inbox, "tick", None, {"timer": True}, every=1)
    killed: dict[str, int] = {}
    chunk = 0
    for point in points:
        chunk += 1
        s.feed(_items(inboxes, 3 * scale, f"c{chunk}", say_every=2))
        mark = s.log_length()
        if point in RUN_POINTS:
            faulty = s.worker(f"runs-{point}", faults=f"{point}:block:{rng.randint(1, 2)}")
        else:
            s.kill(control)  # the faulty one must be the only dispatcher / scanner
            faulty = s.control(f"control-{point}", faults=f"{point}:block")
        s.ready(faulty)
        s.feed(_items(inboxes, 2 * scale, f"d{chunk}", say_every=1))
        s.wait_blocked(point, after=mark, timeout=90)
        s.kill(faulty, signal.SIGKILL)
        killed[point] = 1
        if point in CONTROL_POINTS:
            control = s.control(f"control-after-{point}")
            s.ready(control)
    for inbox in inboxes[:3]:
        s.store.cancel_timer(inbox, "tick")
    _drain(s, timeout=120 * scale)
    return Result(s.counts(), injected={"sigkill": len(killed)},
                  measured={"events": len(s.inputs.keys), "points": ",".join(killed)})


# --- 2. SIGSTOP past the lease, takeover, SIGCONT -------------------------------------------
def pause_past_lease(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    """Twice: the paused worker wakes up to finish (refused), then to heartbeat (refused)."""
    s = make_stack(WAKEFUL_LEASE_TTL="2")
    control, beat = s.control(), s.beat()
    paused = s.worker("runs-paused", faults="after_claim:sleep=3")
    s.ready(control, beat, paused)
    counts = dict.fromkeys(("completions_not_one", "messages_not_one", "late_run_not_fenced",
                            "late_finish_not_refused", "heartbeat_not_refused"), 0)
    measured: dict[str, Any] = {}
    taker = None
    for phase, payload in (("finish", {"say": "one reply"}),
                           ("heartbeat", {"say": "one reply", "work": 1})):
        if taker is not None:
            s.kill(taker)  # the paused worker must be the one that takes the next event
        refused_before = s.store.operator.counters().get("stale_finishes_refused", 0)
        mark = s.log_length()
        inbox = f"pause-{phase}-{uuid.uuid4().hex[:6]}"
        s.feed([(inbox, "chat", "m-1", payload)])
        blocked = s.wait(lambda: s.announced("after_claim", "sleep", after=mark),
                         "the worker at after_claim")
        s.kill(paused, signal.SIGSTOP)
        taker = s.worker(f"runs-taker-{phase[:3]}")
        s.ready(taker)
        s.wait(lambda: s.settled([inbox]), "the takeover finished the event")
        s.kill(paused, signal.SIGCONT)
        late = s.wait(lambda: [line for line in paused.text().splitlines()
                               if f"'inbox': '{inbox}'" in line and "succeeded" in line],
                      "the paused worker's late run ended")[0]
        refused = s.store.operator.counters().get("stale_finishes_refused", 0) - refused_before
        _drain(s, timeout=60)
        done = [r for r in s.store.operator.run_log(inbox) if r.outcome == "done"]
        messages = len(s.store.outbox(inbox))
        deliveries = sum(1 for line in _sent(s) if line["inbox"] == inbox)
        counts["completions_not_one"] += abs(len(done) - 1)
        counts["messages_not_one"] += abs(messages - 1) + abs(deliveries - 1)
        counts["late_run_not_fenced"] += int("'end': 'fenced'" not in late)
        if phase == "finish":
            counts["late_finish_not_refused"] += int(refused < 1)
        else:  # LeaseLost at the heartbeat: it never even tried to finish
            counts["heartbeat_not_refused"] += int(refused != 0)
        measured[phase] = {"paused_generation": blocked["generation"],
                           "finishing_generation": done[0].generation if done else None}
    counts.update(s.counts())
    return Result(counts, injected={"sigstop": 2}, measured=measured)


# --- 3. Two and three beats; beat down for days ---------------------------------------------
def many_beats(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    s = make_stack()
    runner, control = s.worker("runs"), s.control(concurrency=2)
    second_control = s.control("control-2", concurrency=2)
    beats = [s.beat(f"beat-{i}") for i in range(3)]
    s.ready(runner, control, second_control, *beats)
    inboxes = [f"t{i}" for i in range(4 * scale)]
    for inbox in inboxes:
        s.store.add_timer(inbox, "tick", None, {"every": 1}, every=1)
    with s.store.engine.connect() as conn:
        start = int(conn.execute(text("SELECT floor(extract(epoch FROM clock_timestamp()))")).scalar())
    s.wait(lambda: _timer_events(s) >= 6 * len(inboxes) * scale, "timers ticking under three beats",
           timeout=120)
    for b in beats:
        s.kill(b)
    # Beat "stopped for three days": a timer whose due time is three days in the past.
    days_inbox = "days"
    s.store.add_timer(days_inbox, "hourly", start - 3 * 86400, {"hourly": True}, every=3600)
    restarted = s.beat("beat-back")
    s.ready(restarted)
    s.wait(lambda: s.store.events(days_inbox), "the coalesced hourly event")
    for inbox in inboxes:
        s.store.cancel_timer(inbox, "tick")
    _drain(s, timeout=60)
    hourly = s.store.events(days_inbox)
    payload = hourly[0].payload or {}
    expected_skipped = (payload["scheduled_for"] - (start - 3 * 86400)) // 3600
    counts = s.counts()
    counts["coalesce_wrong"] = int(len(hourly) != 1 or payload.get("skipped") != expected_skipped
                                   or expected_skipped < 71)
    return Result(counts, injected={"beats": 3},
                  measured={"timer_events": _timer_events(s), "skipped": payload.get("skipped")})


def _timer_events(s: Stack) -> int:
    with s.store.engine.connect() as conn:
        return len(conn.execute(select(events_table.c.id).where(events_table.c.source == "timer")).all())


# --- 4. Redis flushed and restarted in the middle of a burst ----------------------------------
def redis_flush_restart(make_stack: MakeStack, rng: random.Random, scale: int = 1,
                        redis: Any = None) -> Result:
    s = make_stack()
    workers = [s.worker("runs-a"), s.worker("runs-b")]
    control, beat = s.control(), s.beat()
    s.ready(*workers, control, beat)
    inboxes = [f"r{i}" for i in range(40 * scale)]
    items = _items(inboxes, 50, "burst", say_every=25)  # 2,000 events per scale
    rng.shuffle(items)
    step = max(1, len(items) // 10)
    flush_at, restart_at = rng.randint(1, 4), rng.randint(5, 8)
    flushed = restarted = 0
    for n in range(0, len(items), step):
        s.feed(items[n:n + step])
        if n // step == flush_at:
            redis.flush()
            flushed += 1
        if n // step == restart_at:
            redis.restart(down_for=1.0)
            restarted += 1
    _drain(s, timeout=240 * scale)
    # The workers consume again by themselves: a new event is run through a fresh doorbell.
    late = f"late-{uuid.uuid4().hex[:6]}"
    s.feed([(late, "chat", "after-restart", {"say": "still here"})])
    s.wait(lambda: s.settled([late]), "an event after the restart")
    return Result(s.counts(), injected={"flush": flushed, "restart": restarted},
                  measured={"events": len(items) + 1, "crashes": s.crashes})


# --- 5. PostgreSQL connections killed under load -------------------------------------------
def pg_connections_killed(make_stack: MakeStack, rng: random.Random, scale: int = 1,
                          seconds: float = 10.0) -> Result:
    s = make_stack()
    # Two of the workers pause a moment inside the finish, so the killer lands in there too.
    workers = [s.worker("runs-a"), s.worker("runs-b", faults="before_finish_commit:sleep=0.2")]
    control, beat = s.control(), s.beat()
    s.ready(*workers, control, beat)
    pids = [p.pid for p in (*workers, control, beat)]
    inboxes = [f"p{i}" for i in range(15 * scale)]
    db = s.store.engine.url.database
    admin = create_engine(s.store.engine.url, isolation_level="AUTOCOMMIT", pool_size=1)
    stop = threading.Event()
    terminated = [0]

    def killer() -> None:
        with admin.connect() as conn:
            while not stop.is_set():
                time.sleep(rng.uniform(0.1, 0.5))
                rows = conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :db "
                    "AND pid <> pg_backend_pid() AND application_name = 'wakeful'"), {"db": db}).all()
                terminated[0] += len(rows)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds * scale
    chunk = 0
    while time.monotonic() < deadline:
        chunk += 1
        try:
            s.feed(_items(inboxes, 2, f"c{chunk}", say_every=2))
        except Exception:  # noqa: BLE001 - our own ingest may lose its connection too; retry
            s.store.engine.dispose()
            continue
        time.sleep(0.3)
    stop.set()
    thread.join()
    admin.dispose()
    _drain(s, timeout=180 * scale)
    late = f"late-{uuid.uuid4().hex[:6]}"
    s.feed([(late, "chat", "after-kills", {"say": "pools recovered"})])
    s.wait(lambda: s.settled([late]), "an event after the connection kills")
    counts = s.counts()
    counts["processes_died"] = len(s.crashes)
    stuck = s.store.operator.metrics().get("running", 0)
    counts["stuck_running"] = stuck
    return Result(counts, injected={"backends_terminated": terminated[0]},
                  measured={"events": len(s.inputs.keys), "dead": len(s.store.dead()),
                            "same_pids": pids == [p.pid for p in (*workers, control, beat)]})


# --- 6. One hot inbox and many light ones ---------------------------------------------------
def hot_inbox(make_stack: MakeStack, rng: random.Random, scale: int = 1,
              hot_events: int = 2000, light_inboxes: int = 50) -> Result:
    s = make_stack(WAKEFUL_MAX_RUNS_PER_TASK="5")
    workers = [s.worker("runs-a", concurrency=2), s.worker("runs-b", concurrency=2)]
    control, beat = s.control(), s.beat()
    s.ready(*workers, control, beat)
    hot = "hot"
    total = hot_events * scale
    lights = [f"light{i}" for i in range(light_inboxes)]
    for n in range(0, total, 1000):
        s.feed([(hot, "load", f"h-{i}", {"n": i}) for i in range(n, min(total, n + 1000))])
        s.feed([(inbox, "chat", f"l-{n}", {"n": n}) for inbox in lights])
    for k in range(2):
        s.feed([(inbox, "chat", f"l-tail-{k}", {"n": k}) for inbox in lights])
        time.sleep(0.5)
    _drain(s, timeout=300 * scale)
    with s.store.engine.connect() as conn:
        rows = conn.execute(select(events_table.c.inbox, events_table.c.created,
                                   events_table.c.finished).where(events_table.c.inbox != hot)).all()
    waits = sorted(r.finished - r.created for r in rows)
    hot_runs = s.store.operator.run_log(hot, limit=100000)
    counts = s.counts(gap=False)
    return Result(counts, measured={
        "hot_events": total, "hot_runs": len(hot_runs),
        "hot_generations": len({r.generation for r in hot_runs}),
        "light_done_p50_s": statistics.median(waits) if waits else None,
        "light_done_p99_s": waits[int(0.99 * (len(waits) - 1))] if waits else None})


# --- 7. Poison events -----------------------------------------------------------------------
def poison(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    s = make_stack(WAKEFUL_RUN_TIME_LIMIT="3", WAKEFUL_LEASE_TTL="6")
    workers = [s.worker("runs-a"), s.worker("runs-b")]
    control, beat = s.control(), s.beat()
    s.ready(*workers, control, beat)
    kinds = {"raise": {"raise": True}, "exit": {"exit": True}, "hang": {"hang": 30}}
    for kind, payload in kinds.items():
        for k in range(scale):
            inbox = f"poison-{kind}-{k}"
            s.feed([(inbox, "webhook", "poison", payload)])
            s.feed([(inbox, "chat", f"healthy-{n}", {"say": f"fine {n}"}) for n in range(2)])
            s.feed([(f"neighbour-{kind}-{k}", "chat", "n-0", {"say": "next door"})])
    # A worker killed by an exit comes back under its supervisor in production; here the
    # prefork pool replaces the child by itself.
    _drain(s, timeout=150 * scale)
    counts = s.counts()
    evs = {(e.inbox, e.source_id): e for inbox in {k[0] for k in s.inputs.keys}
           for e in s.store.events(inbox)}
    max_attempts = s.setting("max_attempts")
    poison_wrong = sum(1 for (inbox, sid), e in evs.items() if sid == "poison"
                       and (e.status != "dead" or e.attempts != max_attempts))
    healthy_not_done = sum(1 for (inbox, sid), e in evs.items() if sid != "poison" and e.status != "done")
    counts["poison_not_dead_at_cap"] = poison_wrong
    counts["healthy_not_done"] = healthy_not_done
    return Result(counts, injected={"poison": len(kinds) * scale},
                  measured={"dead": len(s.store.dead())})


# --- 8. The dispatcher killed between send and mark -----------------------------------------
def dispatcher_killed(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    s = make_stack()
    runner, beat = s.worker("runs"), s.beat()
    s.ready(runner, beat)
    counts: dict[str, int] = {}
    measured: dict[str, Any] = {}
    for mode, channel in (("at-least-once", "fault_channels:at_least_once"),
                          ("at-most-once", "fault_channels:at_most_once")):
        env = {"WAKEFUL_OUTBOX_CHANNEL": channel}
        inbox = f"out-{mode}"
        mark = s.log_length()
        faulty = s.control(f"control-{mode}", faults="after_send_before_mark:block", extra_env=env)
        s.ready(faulty)
        s.feed([(inbox, "chat", "m-1", {"say": f"hello ({mode})"})])
        blocked = s.wait_blocked("after_send_before_mark", after=mark)
        s.kill(faulty)
        clean = s.control(f"control-{mode}-clean", extra_env=env)
        s.ready(clean)
        key = blocked["key"]
        if mode == "at-least-once":
            s.wait(lambda: s.outbox_drained(), "the resend after the dispatch timeout")
        else:
            # Give a resend every chance to happen: past the dispatch timeout, several ticks.
            time.sleep(s.setting("dispatch_timeout") + 3)
        deliveries = [line for line in _sent(s) if line["key"] == key]
        measured[f"{mode} deliveries"] = len(deliveries)
        c = s.counts(delivery=mode, inboxes={inbox})
        if mode == "at-least-once":
            c["not_resent_same_key"] = int(len(deliveries) != 2 or len({d["body"] for d in deliveries}) != 1)
        for name, value in c.items():
            counts[name] = counts.get(name, 0) + value
        s.kill(clean)
    return Result(counts, injected={"sigkill": 2}, measured=measured)


def _sent(s: Stack) -> list[dict[str, Any]]:
    from checker import read_jsonl  # type: ignore[import-not-found]

    return read_jsonl(s.sent_log)


# --- 9. Approvals answered at the deadline +- 1 s while the scan runs -----------------------
def approvals_at_deadline(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    s = make_stack(WAKEFUL_SCAN_INTERVAL="0.2", WAKEFUL_APPROVAL_SECRET="faults-approval-secret")
    runner, control, beat = s.worker("runs"), s.control(concurrency=4), s.beat()
    s.ready(runner, control, beat)
    n = 12 * scale
    requests = []
    with s.store.engine.connect() as conn:
        db_now = float(conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar())
    offset = db_now - time.time()  # the database's clock, as seen from here
    for i in range(n):
        inbox, rid = f"appr{i % 4}", f"req-{i}"
        s.store.request_approval(inbox, rid, f"refund #{i}", expires_in=4 + i % 5)
        requests.append((inbox, rid))
    deadlines = {(a.inbox, a.request_id): a.deadline for a in s.store.approvals.view(pending_only=False)}
    answers: list[tuple[str, str, str, Any]] = []
    lock = threading.Lock()

    def answer(inbox: str, rid: str, at: float, said: str) -> None:
        time.sleep(max(0.0, at - (time.time() + offset)))
        from wakeful.approval_tokens import answer_token, make_token  # an answer by task carries its own token

        token = answer_token(make_token(inbox, rid, secret="faults-approval-secret", expires_in=3600), said)
        result = s.client.send_task("wakeful.answer_approval", kwargs={
            "inbox": inbox, "request_id": rid, "answer": said, "token": token}, ignore_result=False
        ).get(timeout=60, interval=0.05)
        with lock:
            answers.append((inbox, rid, said, result.get("outcome")))

    threads = []
    for i, (inbox, rid) in enumerate(requests):
        d = deadlines[(inbox, rid)]
        # Some approvals get all three answers, some only the one at or after the deadline:
        # then the answer races the scan's expiry.
        choices = [(-1, "yes"), (0, "no"), (1, "yes")]
        for delta, said in rng.sample(choices, rng.randint(1, 3)) if i % 3 else choices:
            at = d + delta + rng.uniform(-0.5, 0.5)
            threads.append(threading.Thread(target=answer, args=(inbox, rid, at, said)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    _drain(s, timeout=60)
    stored: dict[tuple[str, str], list[str]] = {}
    for inbox in {r[0] for r in requests}:
        for e in s.store.events(inbox):
            if e.source == "approval":
                stored.setdefault((inbox, e.source_id), []).append((e.payload or {}).get("answer"))
    counts = s.counts()
    counts["approval_outcomes_not_one"] = sum(1 for k in requests if len(stored.get(k, [])) != 1)
    counts["caller_told_other_outcome"] = sum(
        1 for inbox, rid, _, told in answers if stored.get((inbox, rid), [None])[0] != told)
    told = [t for *_, t in answers]
    return Result(counts, injected={"answers": len(answers)},
                  measured={"yes": told.count("yes"), "no": told.count("no"),
                            "expired": told.count("expired")})


# --- 10. A worker whose clock is off by +-10 minutes ----------------------------------------
def skewed_clocks(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    s = make_stack(WAKEFUL_LEASE_TTL="3")
    control, beat = s.control(), s.beat()
    honest = s.worker("runs-honest")
    skewed = {}
    for sign in ("+", "-"):
        prefix, env = faketime_prefix(f"{sign}10m")
        queue = f"skew{'plus' if sign == '+' else 'minus'}"
        skewed[sign] = (queue, s.worker(f"runs-skew{queue}", queues=(queue,),
                                        faults="after_claim:sleep=6", prefix=prefix,
                                        extra_env={**env, "WAKEFUL_FAULTS_LOG": str(s.fault_log)}))
    s.ready(control, beat, honest, *(p for _, p in skewed.values()))
    refused_before = s.store.operator.counters().get("stale_finishes_refused", 0)
    # (a) a live lease held by an honest worker is not stolen by either skewed one.
    held = "held"
    s.feed([(held, "chat", "long", {"work": 4, "say": "long run"})])
    s.wait(lambda: s.store.status(held).holder, "the honest worker holding the inbox")
    stolen = 0
    for queue, _ in skewed.values():
        answer = s.client.send_task("wakeful.run_inbox", args=[held], queue=queue,
                                    ignore_result=False).get(timeout=60, interval=0.05)
        stolen += int("skipped" not in answer)
    # (b) a skewed worker that stalls past its lease does not keep it.
    kept = 0
    for sign, (queue, _) in skewed.items():
        inbox = f"stall{'plus' if sign == '+' else 'minus'}"
        s.store.ingest(inbox, "chat", "m-1", {"say": f"from {sign}"})
        s.inputs.add(inbox, "chat", "m-1")
        s.client.send_task("wakeful.run_inbox", args=[inbox], queue=queue, ignore_result=True)
    _drain(s, timeout=90)
    s.wait(lambda: s.store.operator.counters().get("stale_finishes_refused", 0) - refused_before >= 2,
           "both skewed workers' late finishes refused", timeout=60)
    for sign in skewed:
        inbox = f"stall{'plus' if sign == '+' else 'minus'}"
        done = [r for r in s.store.operator.run_log(inbox) if r.outcome == "done"]
        kept += int(len(done) != 1 or done[0].generation < 2)
    counts = s.counts()
    counts["live_lease_stolen"] = stolen
    counts["expired_lease_kept"] = kept
    return Result(counts, injected={"skewed_workers": 2},
                  measured={"clock": "libfaketime" if LIBFAKETIME else "python time shift",
                            "held_generation": s.store.status(held).generation})


# --- 11. A pickle message and malformed task calls ------------------------------------------
class _Boom:
    """Unpickling this creates a file: proof that a worker unpickled it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def pickle_and_bad_calls(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    from celery import Celery

    s = make_stack()
    runner, control = s.worker("runs"), s.control()
    s.ready(runner, control)
    marker = s.home / "unpickled"
    evil = Celery("evil", broker=s.broker_url)
    evil.conf.update(task_serializer="pickle", accept_content=["pickle", "json"])
    evil.send_task("wakeful.ingest", kwargs={"inbox": "pickled", "source": "x", "source_id": "1",
                                             "payload": {"boom": _Boom(str(marker))}})
    evil.send_task("wakeful.run_inbox", args=["pickled"], queue="wakeful.runs")
    evil.close()
    s.wait(lambda: control.text().count("untrusted content") + runner.text().count("untrusted content") >= 2,
           "both workers refusing the pickled messages")
    bad_calls = [
        ("wakeful.ingest", {"inbox": "bad"}),                                    # missing
        ("wakeful.ingest", {"inbox": 42, "source": "x", "source_id": "1", "payload": {}}),
        ("wakeful.ingest", {"inbox": "bad", "source": "x", "source_id": "2", "payload": "text"}),
        ("wakeful.ingest", {"inbox": "bad", "source": ["x"], "source_id": 3, "payload": {}}),
        ("wakeful.ingest", {"inbox": "bad", "source": "x", "source_id": "4", "payload": {},
                            "priority": "high"}),                                # unexpected
        ("wakeful.answer_approval", {"inbox": "bad", "request_id": "r", "answer": 1}),
        ("wakeful.answer_approval", {"inbox": "bad"}),
    ]
    before = len(s.store.operator.rejections(limit=1000))
    results = [s.client.send_task(name, kwargs=kw, ignore_result=False).get(timeout=60, interval=0.05)
               for name, kw in bad_calls]
    recorded = len(s.store.operator.rejections(limit=1000)) - before
    # Malformed doorbells: refused and recorded, and the run worker goes on.
    for args in ([{"not": "an inbox"}], [], [""]):
        answer = s.client.send_task("wakeful.run_inbox", args=args, queue="wakeful.runs",
                                    ignore_result=False).get(timeout=60, interval=0.05)
        results.append(answer)
    bad_calls += [("wakeful.run_inbox", {})] * 3
    recorded = len(s.store.operator.rejections(limit=1000)) - before
    ok = f"ok-{uuid.uuid4().hex[:6]}"
    s.feed([(ok, "chat", "m", {"say": "still fine"})])
    s.wait(lambda: s.settled([ok]), "a good event after the bad calls")
    counts = s.counts(gap=False)
    counts["pickle_executed"] = int(marker.exists())
    counts["pickle_stored"] = len(s.store.events("pickled"))
    counts["bad_calls_not_recorded"] = len(bad_calls) - recorded
    counts["bad_calls_not_refused"] = sum(1 for r in results if not r.get("rejected"))
    counts["bad_events_stored"] = len(s.store.events("bad"))
    return Result(counts, injected={"pickled": 2, "bad_calls": len(bad_calls)},
                  measured={"rejections_recorded": recorded})


# --- 13. The model API down, then overloaded -------------------------------------------------
def model_api_down(make_stack: MakeStack, rng: random.Random, scale: int = 1) -> Result:
    """The agent's model API refuses connections while questions arrive, a run worker is
    SIGKILLed meanwhile, then the API answers 529 with a Retry-After before it recovers: every
    question is answered once, none is dead (an outage far shorter than the horizon), and a
    poison event beside them is still dead at the cap."""
    from wakeful.agent.scripted import ScriptedModel

    with ScriptedModel() as model:
        s = make_stack(WAKEFUL_TEST_MODEL_URL=model.base_url, WAKEFUL_OUTAGE_BACKOFF_BASE="1",
                       WAKEFUL_OUTAGE_BACKOFF_MAX="2")
        # A worker that blocks before its first finish commits (a "try later" during the
        # outage), to be SIGKILLed there: placed, so the kill never falls between a claim's
        # commit and the claim log the checker counts from.
        healthy, faulty = s.worker("runs-a"), s.worker("runs-faulty", faults="before_finish_commit:block:1")
        control, beat = s.control(), s.beat()
        s.ready(healthy, faulty, control, beat)
        mark = s.log_length()
        model.refuse_connections()
        questions = {(f"asks-{i}", f"q-{n}"): f"asks-{i} question {n}" for i in range(4 * scale) for n in range(2)}
        s.feed([(inbox, "chat", sid, {"ask": text}) for (inbox, sid), text in questions.items()])
        s.feed([("poison-beside", "webhook", "poison", {"raise": True})])
        s.wait_blocked("before_finish_commit", after=mark, timeout=90)
        s.kill(faulty, signal.SIGKILL)  # a crash during the outage still counts as an attempt
        # Three waits each: past what the attempt cap allowed before an outage was told apart.
        s.wait(lambda: _fewest_waits(s, {inbox for inbox, _ in questions}) >= 3,
               "every question to wait out the outage three times", timeout=120 * scale)
        model.fail_next(2 * scale, 529, retry_after=1)
        model.accept_connections()
        _drain(s, timeout=150 * scale)
        counts = s.counts()
        said = {inbox: " ".join(r.body for r in s.store.outbox(inbox)) for inbox, _ in questions}
        counts["questions_not_answered_once"] = sum(
            1 for (inbox, _), text in questions.items() if said[inbox].count(f"Noted: {text}") != 1)
        [poison] = s.store.events("poison-beside")
        counts["poison_not_dead_at_cap"] = int(poison.status != "dead" or poison.attempts != s.setting("max_attempts"))
        waits = _fewest_waits(s, {inbox for inbox, _ in questions})
    return Result(counts, injected={"sigkill": 1, "overloaded_529": 2 * scale},
                  measured={"questions": len(questions), "fewest_waits": waits})


def _fewest_waits(s: Stack, inboxes: set[str]) -> int:
    """The fewest "try later" waits of the events of ``inboxes`` (0 until all are stored)."""
    with s.store.engine.connect() as conn:
        waits = conn.execute(select(events_table.c.waits).where(events_table.c.inbox.in_(inboxes))).scalars().all()
    return min(waits) if len(waits) >= 2 * len(inboxes) else 0


SCENARIOS: dict[str, Callable[..., Result]] = {
    "1 kill at fault points": kill_at_points,
    "2 pause past the lease": pause_past_lease,
    "3 three beats, beat down 3 days": many_beats,
    "4 Redis flushed + restarted": redis_flush_restart,
    "5 PG connections killed": pg_connections_killed,
    "6 hot inbox": hot_inbox,
    "7 poison events": poison,
    "8 dispatcher killed": dispatcher_killed,
    "9 approvals at the deadline": approvals_at_deadline,
    "10 worker clock +-10 min": skewed_clocks,
    "11 pickle and bad calls": pickle_and_bad_calls,
    "12 agent tool calls": agent_tools,  # tests/faults/agent_scenario.py (issue 12)
    "13 the model API down": model_api_down,
    "14 dense worker killed, poison exits": dense_worker_faults,  # tests/faults/dense_scenario.py
}
