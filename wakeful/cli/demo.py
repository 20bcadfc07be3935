"""``wakeful demo``: the article's story, played through real processes on the embedded default.

Two agent-run workers, a control worker (ingest, answers, timers, sweep, outbox) and beat are
started on a SQLite store and a SQLite broker in a directory of the demo's own. The demo then
acts as the outside world (another service calling ``wakeful.ingest``, a human answering
approvals, an operator killing a machine), checks what happened in the store and the outbox
channel, prints an account, stops everything and exits 0 (1 if something did not happen as
the account says it should).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Short real intervals: the whole story in about half a minute.
DEMO_ENV = {
    "WAKEFUL_LEASE_TTL": "2",
    "WAKEFUL_MAX_ATTEMPTS": "3",
    "WAKEFUL_OUTBOX_GAP": "4",
    "WAKEFUL_BACKOFF_BASE": "1",
    "WAKEFUL_BACKOFF_MAX": "2",
    "WAKEFUL_SCAN_INTERVAL": "0.5",
    "WAKEFUL_SWEEP_INTERVAL": "0.5",
    "WAKEFUL_DISPATCH_INTERVAL": "0.5",
    "WAKEFUL_AGENT": "wakeful.agent.demo:agent",
    # wakeful.answer_approval takes an answer only with its token, made from the approval's link
    "WAKEFUL_APPROVAL_SECRET": "demo-approval-secret",
}


MARKER = ".wakeful-demo"
WEBHOOK_SECRET = "demo-webhook-secret"  # the demo's own web process only


class Unexpected(AssertionError):
    pass


def run_demo(directory: Path | None = None, keep: bool = False) -> int:
    home = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="wakeful-demo-"))
    home = home.resolve()
    if directory and home.exists() and any(home.iterdir()):
        if not (home / MARKER).exists():
            print(f"wakeful demo: {home} exists and is not a demo directory; choose another")
            return 2
        shutil.rmtree(home)  # an earlier demo's directory: start from nothing
    home.mkdir(parents=True, exist_ok=True)
    (home / MARKER).write_text("made by wakeful demo; deleted by the next one\n")
    sent_file = home / "sent.jsonl"
    for name in [k for k in os.environ if k.startswith("WAKEFUL_")]:
        del os.environ[name]  # the demo never touches a configured store or broker
    os.environ.update(DEMO_ENV)
    os.environ["WAKEFUL_HOME"] = str(home)
    os.environ["WAKEFUL_OUTBOX_CHANNEL"] = f"jsonl:{sent_file}"

    demo = Demo(home, sent_file)
    try:
        demo.start()
        for scene in demo.scenes():
            scene()
        demo.numbers()
        ok = not demo.failures
    except Exception as exc:  # a timeout, a process that would not start: say so, stop all
        demo.say(f"\n  UNEXPECTED: {type(exc).__name__}: {exc}")
        demo.failures.append(str(exc))
        ok = False
    finally:
        demo.stop()
    if ok:
        print("\nEvery step happened as described. Processes stopped.")
    else:
        print(f"\n{len(demo.failures)} step(s) did not happen as described; logs: {home / 'logs'}")
    if keep or not ok:
        print(f"Demo files kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if ok else 1


class Demo:
    def __init__(self, home: Path, sent_file: Path) -> None:
        self.home = home
        self.sent_file = sent_file
        self.failures: list[str] = []
        self.latencies: list[float] = []

    # --- plumbing -------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        print(text, flush=True)

    def check(self, condition: bool, what: str) -> None:
        if not condition:
            raise Unexpected(what)

    def start(self) -> None:
        from tasks import app, embedded
        from tasks.celeryconfig import QUEUES
        from wakeful.cli.processes import CONTROL_QUEUES, RUN_QUEUES, Processes, free_port
        from tasks.runtime import get_store

        self.app = app
        self.store = get_store()
        self.say("wakeful demo: the article's story, through real worker and beat processes")
        self.say(f"  home  {self.home}  (SQLite store, SQLite broker: nothing else to install)")
        self.store.migrate()
        embedded.init(app, QUEUES)  # tables and queues once, before several processes race
        self.procs = Processes(env=dict(os.environ), logdir=self.home / "logs")
        started = time.monotonic()
        self.worker_a = self.procs.worker("worker-a", RUN_QUEUES)
        self.worker_b = self.procs.worker("worker-b", RUN_QUEUES)
        self.control = self.procs.worker("control", CONTROL_QUEUES, concurrency=2)
        self.beat = self.procs.beat()
        self.web_port = free_port()
        self.web = self.procs.start("web", [sys.executable, "-m", "wakeful.web"], extra_env={
            "WAKEFUL_WEB_HOST": "127.0.0.1", "WAKEFUL_WEB_PORT": str(self.web_port),
            "WAKEFUL_GITHUB_SECRETS": WEBHOOK_SECRET})
        self.procs.wait_ready(self.worker_a, self.worker_b, self.control, self.beat)
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.wait(self._web_up, "the web edge to answer")
        self.say(f"  started web (webhooks), worker-a and worker-b (agent runs), control "
                 f"(ingest, answers, timers, sweep, outbox) and beat in "
                 f"{time.monotonic() - started:.1f}s")
        self.say("  lease 2 s (renewed between steps), 3 attempts, outbox gap 4 s, "
                 "beat ticks every 0.5 s")

    def stop(self) -> None:
        procs = getattr(self, "procs", None)
        if procs is not None:
            procs.stop_all(grace=15)

    def _web_up(self) -> bool:
        import httpx

        try:
            return httpx.get(self.web_url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            if not self.web.alive():
                raise Unexpected("the web process exited:\n" + self.web.text()[-2000:])
            return False

    def scenes(self) -> list[Callable[[], None]]:
        return [self.webhook_twice, self.burst, self.poison, self.killed_worker, self.timer,
                self.approvals, self.outbox]

    def ingest(self, inbox: str, source: str, source_id: str, payload: dict[str, Any],
               want_result: bool = False) -> Any:
        # Exactly what another service does: a task call by name, no routing options.
        result = self.app.send_task("wakeful.ingest", kwargs={
            "inbox": inbox, "source": source, "source_id": source_id, "payload": payload},
            ignore_result=not want_result)
        return result.get(timeout=30, interval=0.05) if want_result else None

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        from wakeful.cli.processes import wait_for

        return wait_for(condition, timeout, what)

    def events(self, inbox: str) -> list[Any]:
        return self.store.events(inbox)

    def all_settled(self, inbox: str, count: int) -> bool:
        events = self.events(inbox)
        return len(events) >= count and all(e.status in ("done", "dead") for e in events)

    def sends(self, inbox: str) -> list[dict[str, Any]]:
        if not self.sent_file.exists():
            return []
        lines = [json.loads(line) for line in self.sent_file.read_text().splitlines() if line]
        return [line for line in lines if line["inbox"] == inbox]

    def woke_after(self, inbox: str, t0: float) -> float:
        return self.store.runs.memory(inbox)["last_run"]["woke_at"] - t0

    # --- the story ------------------------------------------------------------------
    def webhook_twice(self) -> None:
        self.say("\n1. A webhook delivered twice")
        body = json.dumps({"action": "opened", "number": 42,
                           "pull_request": {"title": "Fix the flaky deploy"}}).encode()
        signature = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": "pull_request",
                   "X-GitHub-Delivery": "72f1c3e0", "X-Hub-Signature-256": signature}
        t0 = time.time()
        first = self._post("/hooks/github/alice", body, headers)
        again = self._post("/hooks/github/alice", body, headers)
        forged = self._post("/hooks/github/alice", body.replace(b"42", b"43"), headers)
        self.say(f"   POST /hooks/github/alice (delivery 72f1c3e0) -> {first[0]}; "
                 f"GitHub's redelivery -> {again[0]} duplicate={again[1].get('duplicate')}")
        self.say(f"   a copy with a body the signature does not cover -> {forged[0]} "
                 f"({forged[1].get('error')}), nothing stored")
        self.wait(lambda: self.all_settled("alice", 1) and self.store.operator.run_log("alice"), "alice's run")
        events, runs = self.events("alice"), self.store.operator.run_log("alice")
        latency = self.woke_after("alice", t0)
        self.say(f"   inbox alice: {len(events)} event, {len(runs)} run; the agent was called "
                 f"{latency * 1000:.0f} ms after the first POST")
        self.say("   why: the delivery id is the event key and UNIQUE (inbox, source, source_id) "
                 "refuses the second copy; the signature is checked before anything is stored.")
        self.check(first[0] == 202 and again[0] == 200 and again[1].get("duplicate") is True,
                   f"webhook: expected 202 then 200 duplicate, got {first}, {again}")
        self.check(forged[0] == 401, f"webhook: expected 401 for a forged body, got {forged}")
        self.check(len(events) == 1 and len(runs) == 1, "webhook: expected one event and one run")

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        import httpx

        response = httpx.post(self.web_url + path, content=body, headers=headers, timeout=10)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, {}

    def burst(self) -> None:
        self.say("\n2. A burst of chat messages while the agent is busy")
        self.ingest("bob", "chat", "m-0", {"text": "summarise my inbox", "work": 1.5})
        self.wait(lambda: self.store.status("bob").holder, "bob's first run to start")
        for i, text in enumerate(["deploy it?", "actually wait", "ok go"], start=1):
            self.ingest("bob", "chat", f"m-{i}", {"text": text})
        self.wait(lambda: self.all_settled("bob", 4), "bob's four events")
        runs = self.store.operator.run_log("bob")
        sizes = [len(r.event_ids) for r in runs]
        self.say(f"   4 messages -> {len(runs)} runs of {sizes} events; "
                 f"the last reply: {self._last_body('bob')!r}")
        self.say("   why: the doorbells rung during run 1 found the lease held; release refused "
                 "while work remained, so the same worker took all three in one batch.")
        self.check(sizes == [1, 3], f"burst: expected runs of [1, 3] events, got {sizes}")

    def poison(self) -> None:
        self.say("\n3. A poison event arrives together with a healthy one")
        self.ingest("carol", "chat", "c-0", {"text": "warming up", "work": 1.0, "silent": True})
        self.wait(lambda: self.store.status("carol").holder, "carol's first run to start")
        self.ingest("carol", "webhook", "poison-1", {"fail": "context overflow"})
        self.ingest("carol", "chat", "healthy-1", {"text": "what's on today?"})
        self.wait(lambda: self.all_settled("carol", 3), "carol's poison to go dead", timeout=40)
        by_id = {e.source_id: e for e in self.events("carol")}
        for run in self.store.operator.run_log("carol")[1:]:
            names = [self._source_id("carol", i) for i in run.event_ids]
            self.say(f"   gen {run.generation} claimed {names} and "
                     f"{'finished' if run.outcome == 'done' else 'failed'}")
        poison, healthy = by_id["poison-1"], by_id["healthy-1"]
        self.say(f"   poison: {poison.status}, {poison.attempts} attempts; "
                 f"healthy: {healthy.status}, {healthy.attempts} attempts")
        self.say("   why: attempts count at claim, a retried event is claimed alone, and the cap "
                 "parks it dead where an operator sees it (wakeful dead).")
        self.check(poison.status == "dead" and poison.attempts == 3, "poison: expected dead at 3")
        self.check(healthy.status == "done", "poison: expected the healthy event done")

    def killed_worker(self) -> None:
        from wakeful.cli.processes import holder_pid, pgid_of

        self.say("\n4. A worker is killed (SIGKILL) in the middle of a run")
        self.ingest("dave", "chat", "d-1", {"text": "draft the weekly report",
                                             "slow_first_attempt": 60})
        holder = self.wait(lambda: self.store.status("dave").holder, "dave's run to start")
        pid = holder_pid(holder)
        victim = next((p for p in (self.worker_a, self.worker_b) if pid and pgid_of(pid) == p.pid),
                      None)
        self.check(victim is not None, f"killed worker: no worker owns holder {holder}")
        t0 = time.monotonic()
        self.procs.kill(victim)
        self.say(f"   {victim.name} (main pid {victim.pid}, run in child {pid}) killed mid-run")
        self.wait(lambda: self.all_settled("dave", 1), "dave's event to be finished", timeout=40)
        event = self.events("dave")[0]
        run = self.store.operator.run_log("dave")[-1]
        survivor = next(p for p in (self.worker_a, self.worker_b) if p is not victim)
        self.say(f"   {time.monotonic() - t0:.1f}s later generation {run.generation} "
                 f"({survivor.name}) finished it: status {event.status}, "
                 f"attempts {event.attempts}")
        self.say("   why: the lease lapsed on the database clock, the sweep rang the inbox, the "
                 "new holder took the orphaned event back (attempt counted at claim).")
        self.check(event.status == "done" and event.attempts == 2,
                   f"killed worker: expected done with 2 attempts, got {event.status}/{event.attempts}")
        self.check(holder_pid(run.holder) != pid, "killed worker: finished by the same process?")

    def timer(self) -> None:
        self.say("\n5. A recurring timer")
        self.ingest("erin", "chat", "e-1", {"text": "check the build every second",
                                             "every": 1, "timer_id": "build-check",
                                             "silent": True})
        ticks = self.wait(lambda: [e for e in self.events("erin")
                                   if e.source == "timer" and e.status == "done"][:3] if len(
            [e for e in self.events("erin") if e.source == "timer" and e.status == "done"]) >= 3
            else None, "three timer ticks", timeout=20)
        self.store.cancel_timer("erin", "build-check")
        for e in ticks:
            self.say(f"   event {e.source}/{e.source_id}: late by {e.payload.get('late_by')}s, "
                     f"skipped {e.payload.get('skipped')}")
        self.say("   why: beat only ticks the scan; the store turns each due occurrence into an "
                 "event keyed timer@time and advances the timer in the same transaction.")
        keys = {e.source_id for e in ticks}
        self.check(len(keys) == 3, "timer: expected three distinct occurrences")

    def approvals(self) -> None:
        self.say("\n6. Approvals: one answered, one left to expire")
        self.ingest("frank", "chat", "f-1", {"text": "refund order 881?", "approval": {
            "id": "refund-881", "action": "refund order 881 ($40)", "expires_in": 60}})
        self.ingest("frank", "chat", "f-2", {"text": "refund order 882?", "approval": {
            "id": "refund-882", "action": "refund order 882 ($15)", "expires_in": 2}})
        self.wait(lambda: len(self.store.approvals.view("frank", pending_only=False)) == 2,
                  "both approval requests")
        yes = self._answer("frank", "refund-881", "yes")
        self.say(f"   answer yes to refund-881 -> {yes}")
        self.wait(lambda: any(e.source == "approval" and e.source_id == "refund-882"
                              for e in self.events("frank")), "refund-882 to expire", timeout=20)
        late = self._answer("frank", "refund-882", "yes")
        self.say(f"   nobody answered refund-882 within 2 s; a late yes -> {late}")
        self.wait(lambda: self.all_settled("frank", 4), "frank's runs")
        for e in self.events("frank"):
            if e.source == "approval":
                self.say(f"   the agent resumed with {e.source_id}: {e.payload.get('answer')}")
        self.say("   why: the answer and the expiry share one key, ('approval', id): only one "
                 "is ever stored, and the answer path checks the deadline itself.")
        self.check(yes == "yes" and late == "expired",
                   f"approvals: expected yes then expired, got {yes}, {late}")

    def outbox(self) -> None:
        self.say("\n7. Three messages inside the outbox gap")
        t0 = time.time()
        self.ingest("gina", "chat", "u-0", {"text": "update 0"})
        self.wait(lambda: self.sends("gina"), "the first send")
        for i in (1, 2):
            time.sleep(0.3)
            self.ingest("gina", "chat", f"u-{i}", {"text": f"update {i}"})
            self.wait(lambda i=i: self.all_settled("gina", i + 1), f"gina's update {i}")
        sends = self.wait(lambda: self.sends("gina") if len(self.sends("gina")) >= 2 else None,
                          "two sends", timeout=20)
        for s in sends:
            self.say(f"   +{s['sent_at'] - t0:4.1f}s  send {s['key']}: "
                     f"{s['body'].replace(chr(10) * 2, ' | ')!r}")
        self.say("   why: at most one send per gap per inbox; what piles up meanwhile goes out "
                 "merged in one message (an urgent one would go at once).")
        self.check(len(sends) == 2 and "update 1" in sends[1]["body"]
                   and "update 2" in sends[1]["body"],
                   f"outbox: expected 'update 0' then 'update 1 | update 2', got {sends}")
        self.check(sends[1]["sent_at"] - sends[0]["sent_at"] >= 3,
                   "outbox: the second send came before the gap")

    def numbers(self) -> None:
        for i in range(5):
            t0 = time.time()
            self.ingest("ping", "chat", f"p-{i}", {"text": "ping", "silent": True})
            self.wait(lambda i=i: self.all_settled("ping", i + 1), "ping")
            self.latencies.append(self.woke_after("ping", t0))
        ms = sorted(x * 1000 for x in self.latencies)
        self.say(f"\nWake-up latency (send_task -> agent called, two broker hops on the "
                 f"embedded broker): median {statistics.median(ms):.0f} ms, "
                 f"max {max(ms):.0f} ms over {len(ms)} events")

    # --- helpers --------------------------------------------------------------------
    def _answer(self, inbox: str, request_id: str, answer: str) -> str:
        from wakeful.approval_tokens import answer_token, make_token
        from tasks.application import runtime_settings

        settings = runtime_settings()  # DEMO_ENV's, loaded by this process's Celery app
        link_token = make_token(inbox, request_id, secret=settings.approval_secrets,
                                expires_in=settings.approval_token_ttl)
        token = answer_token(link_token, answer)
        result = self.app.send_task("wakeful.answer_approval", kwargs={
            "inbox": inbox, "request_id": request_id, "answer": answer, "token": token},
            ignore_result=False)
        return result.get(timeout=30, interval=0.05)["outcome"]

    def _last_body(self, inbox: str) -> str:
        rows = self.store.outbox(inbox)
        return rows[-1].body if rows else ""

    def _source_id(self, inbox: str, event_id: int) -> str:
        for e in self.events(inbox):
            if e.id == event_id:
                return e.source_id
        return str(event_id)
