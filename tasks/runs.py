"""``wakeful.run_inbox``: the doorbell's answer. Acquire, claim, run the agent, finish, release.

The task carries only the inbox name; everything else is reloaded from the store. The lease
decides who runs: a ring that finds the inbox held returns at once (the holder will see the
new events, because ``release`` refuses while claimable work remains and the holder loops).
Every write is fenced by (holder, generation), so a worker that stalled past its lease and
woke up again changes nothing.

One task does at most ``WAKEFUL_MAX_RUNS_PER_TASK`` runs; then it hands the inbox back and
rings again, so one busy inbox cannot keep a worker forever.
"""

from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from store import Event, InvalidEvent, Outcome, Store

from tasks.agents import Agent, LeaseLost, Run, load_agent
from tasks.application import app
from tasks.doorbell import ring, ring_dispatch
from tasks.runtime import get_store, holder_name
from tasks.settings import settings

log = logging.getLogger("wakeful.runs")

# Consecutive "claim found nothing but release refused" before giving up the loop: the two
# disagree only for an instant (an event arriving between them). Past this the lease is left
# to lapse and the sweep rings again.
_MAX_EMPTY_REFUSALS = 20

_agent: Agent | None = None


def get_agent() -> Agent:
    global _agent
    if _agent is None:
        _agent = load_agent(settings.agent)
    return _agent


@dataclass
class Lease:
    store: Store
    inbox: str
    holder: str
    generation: int

    def renew(self) -> bool:
        return self.store.renew(self.inbox, self.holder, self.generation)


@app.task(name="wakeful.run_inbox", bind=True, soft_time_limit=settings.run_time_limit,
          time_limit=settings.hard_time_limit)
def run_inbox(self, inbox: str) -> dict[str, Any]:
    """Run the agent on ``inbox`` until it has nothing claimable left (or the bound)."""
    store = get_store()
    agent = get_agent()  # a broken WAKEFUL_AGENT fails here, before any event is claimed
    holder = holder_name(self.request.id)
    generation = store.acquire(inbox, holder)
    if generation is None:
        return {"inbox": inbox, "skipped": "another worker holds the lease"}
    lease = Lease(store, inbox, holder, generation)
    runs: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"inbox": inbox, "generation": generation, "runs": runs}
    try:
        summary["end"] = _loop(lease, agent, runs)
    finally:
        if any(r.get("messages") for r in runs):
            ring_dispatch(inbox)  # the first message after a quiet spell goes out now
    return summary


def _loop(lease: Lease, agent: Agent, runs: list[dict[str, Any]]) -> str:
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    empty_refusals = 0
    while True:
        if runs and not lease.renew():
            return "fenced"
        if len(runs) >= settings.max_runs_per_task and _hand_back(lease):
            return "handed back"
        events = store.claim(inbox, holder, gen)
        if not events:
            if store.release(inbox, holder, gen):
                return "released"
            empty_refusals += 1
            if empty_refusals >= _MAX_EMPTY_REFUSALS:
                log.error("inbox %r: claim finds nothing but release refuses; leaving the "
                          "lease to lapse (the sweep rings again)", inbox)
                return "stuck"
            time.sleep(0.01 * empty_refusals)
            continue
        empty_refusals = 0
        result = _run_once(lease, agent, events)
        runs.append(result)
        if result["outcome"] == "fenced":
            return "fenced"


def _run_once(lease: Lease, agent: Agent, events: list[Event]) -> dict[str, Any]:
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    ids = [e.id for e in events]
    result: dict[str, Any] = {"events": ids}
    run = Run(inbox=inbox, events=events, generation=gen, memory=store.memory(inbox),
              _heartbeat=lease.renew)
    try:
        outcome = agent(run) or Outcome()
    except LeaseLost:
        result["outcome"] = "fenced"
        return result
    except (Exception, SoftTimeLimitExceeded) as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("inbox %r run on events %s failed: %s", inbox, ids, error,
                    exc_info=not isinstance(exc, SoftTimeLimitExceeded))
        finished = store.finish(inbox, holder, gen, ids, error=error)
        result.update(outcome="error" if finished else "fenced", error=error[:200])
        return result
    try:
        finished = store.finish(inbox, holder, gen, ids, outcome=outcome)
    except (InvalidEvent, ValueError, TypeError) as exc:
        # The agent returned something the store refuses (not an Outcome, a bad timer ...):
        # nothing of it was written. Fail the run like an exception in the agent, so the
        # events back off and reach dead at the cap instead of waiting out lease after lease.
        error = f"invalid outcome: {exc}"
        log.warning("inbox %r run on events %s: %s", inbox, ids, error)
        finished = store.finish(inbox, holder, gen, ids, error=error)
        result.update(outcome="error" if finished else "fenced", error=error[:200])
        return result
    if finished:
        result.update(outcome="done", messages=len(outcome.messages),
                      approvals=len(outcome.approvals), timers=len(outcome.timers))
    else:
        result["outcome"] = "fenced"
    return result


def _hand_back(lease: Lease) -> bool:
    """Give the inbox back with work left and ring again (the bound on runs per task).

    Needs a store ``release`` that can be told to resign while work remains; without it
    the task keeps the inbox (correct, only less fair).
    """
    if not _release_can_force(lease.store):
        return False
    if not lease.store.release(lease.inbox, lease.holder, lease.generation, force=True):
        return False
    ring(lease.inbox)
    return True


def _release_can_force(store: Store) -> bool:
    try:
        return "force" in inspect.signature(store.release).parameters
    except (TypeError, ValueError):
        return False
