"""``wakeful.run_inbox``: the doorbell's answer. Acquire, claim, run the agent, finish, release.

The task carries only the inbox name; everything else is reloaded from the store. The lease
decides who runs: a ring that finds the inbox held returns at once (the holder will see the
new events, because the release refuses while claimable work remains and the holder loops).
Every write is fenced by (holder, generation), so a worker that stalled past its lease and
woke up again changes nothing.

A single-batch wake costs two commits: ``runs.start`` (acquire + claim + the inbox's memory)
and ``finish_and_claim`` (finish + the next claim, or the release when nothing is left; a
claim also extends the lease). A draining task's finish that releases also takes its next
inbox from the backlog: one commit per drained wake. While the agent runs, the process's
lease keeper renews the lease (the agent need not call ``run.heartbeat()``, though a long
step may, to stop early once the lease is lost). The task's own transactions run on one
pinned connection: one pool checkout (and pre-ping) per task, not one per transaction; in a
dense worker it goes back to the pool while the agent waits (``store.transactions.unpinned``).

One task does at most ``WAKEFUL_MAX_RUNS_PER_TASK`` runs; its last run finishes without
claiming more, and the task hands the inbox back (``release(force=True)``) and rings again,
so one busy inbox cannot keep a worker forever.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_init
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from wakeful import telemetry
from store import Event, InvalidEvent, InvalidOutcome, Outcome, RunStart, RunStep, Store
from store.spend import Budget, Usage, Verdict

from wakeful.agent import Agent, LeaseLost, Run, TryLater, load_agent, summary_of
from tasks.application import app, runtime_settings
from tasks import doorbell, isolation, runtime
from tasks.lease_keeper import keeper
from tasks.runtime import get_store, holder_name

log = logging.getLogger("wakeful.runs")
COUNT_TRIES = 3  # a model call's count: a pool wait that ran out is tried twice more ...
COUNT_BACKOFF = 0.2  # ... after 0.2 s, then 0.4 s (the pool's own wait comes first)
T = TypeVar("T")

# Consecutive "claim found nothing but release refused" before giving up the loop: the two
# disagree only for an instant (an event arriving between them). Past this the lease is left
# to lapse and the sweep rings again.
_MAX_EMPTY_REFUSALS = 20

# How long a task drains the backlog alone before each inbox it takes rings for help. A
# recruited run task takes a pool process from whatever else the worker serves (ingest, on a
# prefork worker that also runs them), while a real backlog loses only this long of a second
# worker (docs/performance.md, "Measurements behind the design").
RECRUIT_AFTER = 0.05

_agent: Agent | None = None


def get_agent() -> Agent:
    global _agent
    if _agent is None:
        _agent = load_agent(runtime_settings().agent)
    return _agent


@worker_init.connect
def _load_the_agent_at_start(**_kwargs: Any) -> None:
    # In a dense worker the first run would load the agent (the claude agent imports the
    # anthropic SDK: a second or more holding the GIL) while every other run of the first
    # burst waits on it. Loaded at start instead; an agent that fails to load says so on the
    # first run, as it does in a prefork worker, whose children each load it once.
    if runtime.dense():
        try:
            get_agent()
        except Exception as exc:  # noqa: BLE001 - reported by every run that needs it
            log.warning("the agent did not load at start (%s: %s)", type(exc).__name__, exc)


@dataclass
class Drain:
    """A draining task's way through the backlog (see ``_drain_backlog``)."""

    until: float  # time.monotonic() after which it takes no more inboxes
    skip: list[str]  # inboxes it handed back: not taken again by this task
    taken: tuple[str, RunStart] | None = None  # taken by its last finish, not yet served

    def open(self) -> bool:
        return time.monotonic() < self.until


@dataclass
class HeldLease:
    store: Store
    inbox: str
    holder: str
    generation: int
    deadline: float  # time.monotonic() of the task's soft time limit
    drain: Drain | None = None  # set when the task goes on with the backlog after this inbox

    def renew(self) -> bool:
        return _once_more_on_disconnect(lambda: self.store.renew(self.inbox, self.holder, self.generation))

    def mint_grant(self, routes: list[str], ttl: int) -> str | None:
        """A grant for the egress proxy, valid while this lease is (None once it is lost)."""
        return self.store.grants.mint(self.inbox, self.holder, self.generation, routes, ttl)

    def check_budget(self, budget: Budget) -> Verdict:
        """May this run make a model call (store/spend.py)? A refusal is fenced by this lease."""
        return _once_more_on_disconnect(lambda: self.store.spend.check(
            self.inbox, self.holder, self.generation, budget))

    def count_spend(self, budget: Budget, usage: Usage) -> None:
        """A model call's usage, counted at once and not fenced: it was paid for. A count
        that gets no connection (the pool's wait ran out, the database is away) is tried
        again, up to ``COUNT_TRIES`` times; should one have committed unseen, the call counts
        twice: a budget errs towards stopping early. If every try fails the run goes on (its
        call was made; failing the run would make it again on the retry, paid twice) and the
        day's figures are short by this call: said once, at WARNING."""
        for attempt in range(1, COUNT_TRIES + 1):
            try:
                self.store.spend.count(self.inbox, budget, usage)
                return
            except (DBAPIError, PoolTimeout) as exc:
                if isinstance(exc, DBAPIError) and not _disconnected(exc):
                    raise
                if attempt == COUNT_TRIES:
                    log.warning("a model call's usage was not counted (%s: %s): inbox %s, model %s, %d tokens; "
                                "today's spend is short by it", type(exc).__name__, exc, self.inbox,
                                usage.model, usage.tokens)
                    return
                time.sleep(COUNT_BACKOFF * attempt)


@app.task(name="wakeful.run_inbox", bind=True)  # its time limits: task_annotations (tasks/celeryconfig.py)
def run_inbox(self, inbox: Any = None, drain: bool = False, lane: int | None = None) -> dict[str, Any]:
    """Run the agent on ``inbox`` until it has nothing claimable left (or the bound).
    A recruit (``lane`` set: doorbell.ring_backlog) goes to the backlog at once: the task
    that rang it has just taken ``inbox``.

    Returns a summary Flower shows: the inbox, the generation, each run's events and outcome,
    and how the task ended (released, handed back, fenced).
    """
    store = get_store()
    agent = get_agent()  # a broken WAKEFUL_AGENT fails here, before any event is claimed
    settings = runtime_settings()
    deadline = time.monotonic() + settings.run_time_limit
    holder = holder_name(self.request.id)
    # From here on a ring queues a new task (this one may not reach its event); rings that
    # were coalesced onto this one while it was queued make it drain.
    if not (isinstance(lane, int) and 0 <= lane < doorbell.RECRUIT_LANES):
        lane = None  # not a lane a ring sends: a plain ring
    drain = doorbell.started(lane) or drain or lane is not None
    if self.request.expires and isinstance(inbox, str):
        doorbell.swept_started(inbox)  # only the sweep's rings expire
    backlog = None
    if drain:
        until = min(time.monotonic() + settings.drain_seconds, deadline - settings.run_time_limit / 2)
        backlog = Drain(until, skip=[])
    with store.transactions.pinned():
        if lane is None or not isinstance(inbox, str):
            summary = _run_inbox(store, agent, inbox, holder, deadline, backlog)
        else:
            summary = {"inbox": inbox, "recruited": f"lane {lane}"}
        if backlog is not None and summary.get("inbox") is not None:
            if summary.get("end") == "handed back":
                backlog.skip.append(inbox)
            summary["next"] = _drain_backlog(store, agent, holder, deadline, backlog)
    return summary


def _run_inbox(store: Store, agent: Agent, inbox: Any, holder: str, deadline: float,
               backlog: Drain | None) -> dict[str, Any]:
    try:
        start = store.runs.start(inbox, holder)
    except InvalidEvent as exc:  # a malformed doorbell (missing or wrong-typed inbox)
        store.operator.record_rejection("task:wakeful.run_inbox", str(exc), inbox=inbox)
        log.warning("run_inbox rejected: %s (inbox=%r)", exc, repr(inbox)[:80])
        return {"inbox": None, "rejected": str(exc)}
    if start.generation is None:
        return {"inbox": inbox, "skipped": "nothing to claim, or another worker holds the lease"}
    if backlog is not None and runtime.dense():
        # This task stands for rings coalesced onto it, and its own inbox will keep it for
        # as long as its agent waits: another task must take up the backlog meanwhile, or
        # the rings it stands for wait until its run ends.
        doorbell.ring_backlog(inbox)
    return _serve(HeldLease(store, inbox, holder, start.generation, deadline, backlog), agent, start)


def _drain_backlog(store: Store, agent: Agent, holder: str, deadline: float,
                   backlog: Drain) -> dict[str, Any]:
    """For a draining ring (a coalesced one, which stands for the rings skipped while it was
    queued, or a sweep's, which stands for lost ones): once its own inbox is idle, the task
    takes the inbox with the oldest ready event and no live lease straight from the database
    (store/backlog.py) until none is left, for up to ``WAKEFUL_DRAIN_SECONDS``; past that it
    rings again so another task goes on. Once it has drained for ``RECRUIT_AFTER``, each
    inbox it takes rings (coalesced) so that a free worker joins in: a burst one task clears
    at once recruits nobody. An inbox this task handed back is not taken again by it.

    A finish that releases its inbox while the drain is open takes the next inbox in its
    own transaction (``store.runs.finish_and_claim(take_next=...)``): one commit per drained wake.
    ``runs.start_next`` takes one only when that did not happen (the first take, a finish
    that was fenced or handed its inbox back)."""
    served: list[str] = []
    # A dense worker has threads to spare, and each run waits seconds: recruit at once.
    recruit_from = time.monotonic() + (0.0 if runtime.dense() else RECRUIT_AFTER)
    while True:
        got, backlog.taken = backlog.taken, None
        if got is None:
            if not backlog.open():
                if served:
                    doorbell.ring_backlog(served[-1])  # the backlog may not be empty: hand it on
                break
            got = store.runs.start_next(holder, skip=backlog.skip)
            if got is None:
                break
        inbox, start = got
        served.append(inbox)
        if time.monotonic() >= recruit_from:
            doorbell.ring_backlog(inbox)
        lease = HeldLease(store, inbox, holder, start.generation, deadline, backlog)
        if _serve(lease, agent, start)["end"] == "handed back":
            backlog.skip.append(inbox)
    return {"inboxes": len(served), "first": served[:20]}


def _serve(lease: HeldLease, agent: Agent, start: RunStart) -> dict[str, Any]:
    """The runs of one inbox under one lease, from its first batch until it is released,
    handed back or fenced."""
    inbox = lease.inbox
    runs: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"inbox": inbox, "generation": lease.generation, "runs": runs}
    try:
        summary["end"] = _loop(lease, agent, start.events, start.memory, runs)
    finally:
        if any(r.get("messages") for r in runs):
            doorbell.ring_dispatch(inbox)  # the first message after a quiet spell goes out now
        if any(r.get("effects") for r in runs):
            from tasks.effects import ring_effects

            ring_effects(inbox)  # committed or released tool calls run now (agent kit)
    return summary


def _loop(lease: HeldLease, agent: Agent, events: list[Event], memory: dict[str, Any],
          runs: list[dict[str, Any]]) -> str:
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    empty_refusals = 0
    while True:
        if not events:
            if store.release(inbox, holder, gen):
                return "released"
            empty_refusals += 1  # an event arrived since the last claim: take it
            if empty_refusals >= _MAX_EMPTY_REFUSALS:
                log.error("inbox %r: claim finds nothing but release refuses; leaving the "
                          "lease to lapse (the sweep rings again)", inbox)
                return "stuck"
            time.sleep(0.01 * (empty_refusals - 1))
            events = store.claim(inbox, holder, gen)
            if not events and not lease.renew():
                return "fenced"  # the release refused because the lease is no longer ours
            _claimed(inbox, gen, events)
            memory = store.runs.memory(inbox) if events else memory
            continue
        empty_refusals = 0
        last = len(runs) + 1 >= runtime_settings().max_runs_per_task
        result, step = _run_once(lease, agent, events, memory, claim_next=not last)
        runs.append(result)
        if result["outcome"] == "fenced":
            return "fenced"
        if last:
            return _hand_back(lease)
        if step.released:
            return "released"
        events, memory = step.events, step.memory


def _run_once(lease: HeldLease, agent: Agent, events: list[Event], memory: dict[str, Any],
              claim_next: bool) -> tuple[dict[str, Any], RunStep]:
    """One run, a span of the trace that rang this task (docs/operating.md "Traces")."""
    with telemetry.span("wakeful.run", attributes={
            "wakeful.inbox": lease.inbox, "wakeful.generation": lease.generation,
            "wakeful.event_ids": [e.id for e in events],
            "wakeful.event_sources": sorted({e.source for e in events})}):
        result, step = _run_batch(lease, agent, events, memory, claim_next)
        telemetry.annotate(**{"wakeful.run.outcome": result.get("outcome")})
        return result, step


def _run_batch(lease: HeldLease, agent: Agent, events: list[Event], memory: dict[str, Any],
               claim_next: bool) -> tuple[dict[str, Any], RunStep]:
    inbox = lease.inbox
    ids = [e.id for e in events]
    result: dict[str, Any] = {"events": ids}
    try:
        name = f"{inbox}@{lease.generation}"
        end = functools.partial(_end_past_deadline, lease, ids, threading.get_ident())
        # Where runs share the process, the agent waits (on a model, a tool) without a
        # database connection: the pinned one goes back to the pool until the finish. A
        # prefork child runs one run at a time, so it keeps its connection (and saves a
        # checkout and its pre-ping on every wake).
        unpinned = lease.store.transactions.unpinned() if runtime.shares_process() else contextlib.nullcontext()
        with unpinned, keeper.holding(lease, runtime_settings().lease_ttl, lease.deadline, name, end) as held:
            run = Run(inbox=inbox, events=events, generation=lease.generation,
                      memory=memory, _heartbeat=held.heartbeat, _mint_grant=lease.mint_grant,
                      _check_budget=lease.check_budget, _count_spend=lease.count_spend,
                      _timers=functools.partial(lease.store.timers, inbox))
            outcome = isolation.call_agent(agent, run, deadline=lease.deadline) or Outcome()
    except LeaseLost:
        result["outcome"] = "fenced"
        return result, RunStep(finished=False, events=[], released=False)
    except TryLater as exc:
        # An outage, not a poison event: the attempt is given back and the events wait.
        error = f"try later: {exc}"
        log.warning("inbox %r run on events %s: %s (retry after %s)", inbox, ids, error,
                    "the backoff" if exc.after is None else f"{exc.after:g}s")
        return _complete(lease, ids, claim_next, result, error=error, retry_after=exc.seconds)
    except (Exception, SoftTimeLimitExceeded) as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("inbox %r run on events %s failed: %s", inbox, ids, error,
                    exc_info=not isinstance(exc, SoftTimeLimitExceeded))
        return _complete(lease, ids, claim_next, result, error=error)
    try:
        effects = getattr(outcome, "effects", None)
        if isinstance(effects, list | tuple) and effects:  # one no configured tool runs waits for ever
            from wakeful.agent.config import current
            from wakeful.agent.effects import refuse_unrunnable

            refuse_unrunnable(list(effects), current(required=False))
        done = _complete(lease, ids, claim_next, result, outcome=outcome)
        if result.get("outcome") == "done":
            result.update(summary_of(agent, outcome))  # the agent's own words for Flower
        return done
    except InvalidOutcome as exc:
        # The agent returned something the store refuses (not an Outcome, a bad timer ...):
        # nothing of it was written. Fail the run like an exception in the agent, so the
        # events back off and reach dead at the cap instead of waiting out lease after lease.
        error = f"invalid outcome: {exc}"
        log.warning("inbox %r run on events %s: %s", inbox, ids, error)
        return _complete(lease, ids, claim_next, result, error=error)


def _end_past_deadline(lease: HeldLease, ids: list[int], thread_id: int) -> None:
    """The lease keeper's call when a run passes ``WAKEFUL_RUN_TIME_LIMIT``, whatever pool
    carries it: the run's events fail (the attempt stands: a run that never ends is a poison
    event's way too), the lease is given back and the inbox rung, so its other events do not
    wait for the stuck run. The run's own finish, whenever it comes, is refused (fenced). In a
    dense worker the run's thread also gets ``SoftTimeLimitExceeded`` raised in it, as a
    prefork child gets it from Celery (Celery's threads pool has no time limits,
    celery#9203, and cannot terminate a job, celery#10490): at its next Python bytecode, so a
    call blocked in C (a socket read) ends when that call returns or times out."""
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    error = f"the run passed WAKEFUL_RUN_TIME_LIMIT ({runtime_settings().run_time_limit}s)"
    if store.runs.finish(inbox, holder, gen, ids, error=error):
        log.warning("inbox %r run on events %s: %s; ended", inbox, ids, error)
    if store.release(inbox, holder, gen, force=True):
        doorbell.ring(inbox)
    if runtime.dense():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(SoftTimeLimitExceeded))


def _complete(lease: HeldLease, ids: list[int], claim_next: bool, result: dict[str, Any], *,
              outcome: Outcome | None = None, error: str | None = None, retry_after: int | None = None
              ) -> tuple[dict[str, Any], RunStep]:
    """Finish the run (fenced) and, unless this is the task's last run, claim the next batch."""
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    drain = lease.drain
    take_next = drain.skip if drain is not None and drain.open() else None
    if claim_next:
        step = _once_more_on_disconnect(lambda: store.runs.finish_and_claim(
            inbox, holder, gen, ids, outcome=outcome, error=error, retry_after=retry_after,
            take_next=take_next))
    else:
        step = RunStep(_once_more_on_disconnect(lambda: store.runs.finish(
            inbox, holder, gen, ids, outcome=outcome, error=error, retry_after=retry_after)),
            events=[], released=False)
    if step.next is not None:
        assert drain is not None
        drain.taken = step.next
    if claim_next:
        fenced = not step.finished and not step.released and not step.events
    else:
        fenced = not step.finished and not lease.renew()
    if fenced:
        result["outcome"] = "fenced"
    elif error is not None:
        result.update(outcome="error" if retry_after is None else "waiting", error=error[:200])
    else:
        assert outcome is not None
        result.update(outcome="done", messages=len(outcome.messages),
                      approvals=len(outcome.approvals), timers=len(outcome.timers),
                      effects=len(outcome.effects) + len(outcome.answered))
    return result, step


def _once_more_on_disconnect(call: Callable[[], T]) -> T:
    """A connection lost under a finish or a renewal (a database restart, a failover) rolls
    it back; the next call gets a fresh connection, so try once more rather than lose the
    agent's work. Safe: both re-check the lease, and the finish each event's state, so one
    that did commit (an ambiguous commit) is not applied twice."""
    try:
        return call()
    except DBAPIError as exc:
        if not _disconnected(exc):
            raise
        log.warning("a store call lost its database connection (%s); retrying once", exc.orig)
        return call()


def _disconnected(exc: DBAPIError) -> bool:
    """The database, not the statement: a lost connection, a refused one, a lock or
    serialization wait given up (OperationalError). A programming error is none of these."""
    return exc.connection_invalidated or isinstance(exc, OperationalError)


def _hand_back(lease: HeldLease) -> str:
    """The bound on runs per task: give the inbox back and ring it, if work is left."""
    store, inbox, holder, gen = lease.store, lease.inbox, lease.holder, lease.generation
    if store.release(inbox, holder, gen):
        return "released"  # nothing left anyway
    if not store.release(inbox, holder, gen, force=True):
        return "fenced"
    doorbell.ring(inbox)  # to the back of the queue: other inboxes get a worker first
    return "handed back"
