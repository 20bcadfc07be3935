"""Flower shows the runs an operator came for (docs/operating.md "Flower"): a real worker,
control worker, beat and Flower on PostgreSQL and Redis. Beat's ticks (a timer scan and an
outbox tick every half second here) never bury the ``wakeful.run_inbox`` rows, and every row
Flower lists reaches an outcome: none stays pending for want of an event, batch tasks'
messages included."""

from __future__ import annotations

import socket
import sys
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
REDIS_PG = [pytest.param("redis_pg", marks=[pytest.mark.postgres, pytest.mark.redis])]
LOGIN = ("operator", "long-enough-secret")
# Beat's housekeeping: what it ticks, none of which is a wake-up of an inbox.
TICKS = ("wakeful.scan_timers", "wakeful.sweep", "wakeful.purge", "wakeful.execute_effects")
OUTCOMES = ("SUCCESS", "FAILURE", "REVOKED", "REJECTED", "IGNORED")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Flower:
    def __init__(self, url: str) -> None:
        self.url = url

    def up(self) -> bool:
        try:
            return httpx.get(self.url + "/healthcheck", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def tasks(self) -> list[dict[str, Any]]:
        found = httpx.get(self.url + "/api/tasks", auth=LOGIN, timeout=10)
        found.raise_for_status()
        return list(found.json().values())

    def named(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.tasks() if t.get("name") == name]


def _ran(c: Any, task: str) -> int:
    """How many times the control worker has finished ``task`` (its log's lines)."""
    [control] = [p for p in c.procs.procs if p.name == "control"]
    return sum(1 for line in control.text().splitlines() if f"Task {task}[" in line and " succeeded in " in line)


@pytest.mark.parametrize("backend", REDIS_PG)
def test_flower_lists_the_runs_and_their_outcomes_not_the_ticks(make_cluster: Any) -> None:
    # No sweep: its rings drain, and a task that drains serves other inboxes under its own.
    c = make_cluster(run_workers=1, env={"WAKEFUL_SWEEP_INTERVAL": "3600"})
    port = _free_port()
    c.procs.start("flower", [sys.executable, "-m", "wakeful.cli.main", "flower"],
                  extra_env={"WAKEFUL_FLOWER_BASIC_AUTH": ":".join(LOGIN), "WAKEFUL_FLOWER_PORT": str(port)})
    flower = Flower(f"http://127.0.0.1:{port}")
    c.wait(flower.up, "Flower answering", timeout=60)

    # Flower sees only the events sent once it listens: wake an inbox until it lists its run.
    warmups: list[str] = []

    def watching() -> bool:
        if not warmups or c.settled("warmup", len(warmups)):
            warmups.append(f"w-{len(warmups)}")
            c.ingest("warmup", "chat", warmups[-1], {"text": "are you there"})
        return any(t.get("args") == "['warmup']" for t in flower.named("wakeful.run_inbox"))

    c.wait(watching, "Flower listing a run it saw", timeout=120)
    scans = _ran(c, "wakeful.scan_timers")
    inboxes = ["grace", "heidi", "ivan"]
    # One wake at a time: rung on an idle system, each is its own run task's row (a task
    # that drains names the inboxes it took besides its own only in its summary).
    for inbox in inboxes:
        c.ingest(inbox, "chat", "m-1", {"text": "hello"})
        c.wait(lambda: c.settled(inbox, 1), f"{inbox}'s wake done", timeout=60)
    # Several ticks of beat's timer scan ran while Flower watched.
    c.wait(lambda: _ran(c, "wakeful.scan_timers") >= scans + 4, "beat's timer scans", timeout=60)

    def runs_listed() -> bool:
        done = [t for t in flower.named("wakeful.run_inbox") if t.get("state") == "SUCCESS"]
        return all(any(t.get("args") == f"[{inbox!r}]" and "done" in (t.get("result") or "") for t in done)
                   for inbox in inboxes)

    c.wait(runs_listed, "each inbox's run listed with its summary", timeout=60)
    listed = flower.tasks()
    ticks = {name: sum(1 for t in listed if t.get("name") == name) for name in TICKS}
    assert ticks == dict.fromkeys(TICKS, 0), "beat's ticks listed in Flower"

    # A batch task's messages (ingest, a run's dispatch) each reach an outcome: the events
    # the batch sends for them, not a row pending forever.
    def ingests_listed() -> list[dict[str, Any]] | None:
        rows = flower.named("wakeful.ingest")
        mine = [t for t in rows if any(f"'inbox': {inbox!r}" in (t.get("kwargs") or "") for inbox in inboxes)]
        return rows if len(mine) == len(inboxes) and all(t.get("state") == "SUCCESS" for t in rows) else None

    ingests = c.wait(ingests_listed, "each ingest message listed with its outcome", timeout=60)
    assert all("'stored': " in t["result"] for t in ingests)

    def dispatches_settled() -> list[dict[str, Any]] | None:
        rows = flower.named("wakeful.dispatch_outbox")
        return rows if rows and all(t.get("state") in OUTCOMES for t in rows) else None

    dispatches = c.wait(dispatches_settled, "every dispatch listed reaching its outcome", timeout=60)
    # The rings after runs that wrote a reply, never the argument-less tick.
    assert all(t.get("kwargs") not in (None, "{}") for t in dispatches), dispatches
    assert not [t for t in flower.tasks() if t.get("state") == "PENDING"]
