"""Named fault points: where a fault test makes a process stop, so it can be killed or paused
at an exact place. Inert unless ``WAKEFUL_FAULTS`` names them.

``WAKEFUL_FAULTS`` is a comma-separated list of ``point:action[:n]`` (or ``@/path/file`` whose
lines are such entries). Actions:

- ``log``: record that the point was reached and go on (the fault tests' claim log);
- ``block``: record it, then sleep forever (the test SIGKILLs or SIGSTOPs the process);
- ``exit``: record it, then ``os._exit(70)`` (a process dying at that exact point);
- ``sleep=S``: record it, sleep S seconds, go on (a stall, e.g. past the lease);
- ``raise``: record it, then raise ``FaultRaised`` (a bug or an unexpected error there);
- ``hold``: record it, then wait until the file named by ``WAKEFUL_FAULTS_RELEASE`` exists
  (a test holds the process there until what it waits for has happened, then lets it go).

With ``:n`` the action is taken the n-th time this process reaches the point; the earlier
times are only logged. Every reach of a named point appends one JSON line (point, action,
pid, time and the point's context: inbox, generation, event ids ...) to the file named by
``WAKEFUL_FAULTS_LOG`` *before* acting, so a test can wait for "blocked at X" and then kill.

The points are hooks around the run, not lines in it (as dramatiq's middleware or
Temporal's interceptors): ``install(app)``, called once when ``tasks.app`` is built, does
nothing unless ``WAKEFUL_FAULTS`` names a point; then it wraps, in this process,

- the process's store as ``tasks.runtime.get_store`` opens it (``STORE_HOOKS``): the run
  steps (``runs.start``, ``start_next``, ``finish``, ``finish_and_claim``: ``after_claim``,
  ``before_finish_commit``, ``after_finish_commit``), ``run_scheduler`` (``during_scan``),
  ``intake.ingest_many`` (``before_ingest_commit``) and the channel ``outgoing.dispatch_many``
  is given (``after_send_before_mark``);
- the ``wakeful.ingest`` task's body (``ingest_batch``);
- ``tasks.isolation.call_agent`` (``agent_call``, in the worker's process, before a run
  apart is started).

So the run loop's text holds no fault point, and ``store/`` knows nothing of them. The points
inside a store transaction (``before_finish_commit``, ``during_scan``,
``before_ingest_commit``) are reached from SQLAlchemy's ``commit`` event on the process's own
engine, which fires just before COMMIT is sent: a process killed there leaves an open
transaction that PostgreSQL rolls back.

With ``WAKEFUL_FAULTS`` unset nothing is wrapped: the run pays nothing.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

ENV = "WAKEFUL_FAULTS"
LOG_ENV = "WAKEFUL_FAULTS_LOG"
RELEASE_ENV = "WAKEFUL_FAULTS_RELEASE"

POINTS = (
    "after_claim",            # a batch claimed and committed, the agent not yet called
    "before_finish_commit",   # the fenced finish written, its COMMIT not yet sent
    "after_finish_commit",    # the finish committed, the task not yet told
    "after_send_before_mark", # the channel accepted a message, the rows not yet marked sent
    "during_scan",            # the timer scan fired timers, its COMMIT not yet sent
    "ingest_batch",           # a batch of ingest messages in a pool process, nothing stored yet
    "before_ingest_commit",   # a batch of ingest messages written, its COMMIT not yet sent
    "agent_call",             # in a process shared by runs: the agent called inline or apart
)
ACTIONS = ("log", "block", "exit", "sleep", "raise", "hold")


class FaultRaised(RuntimeError):
    """What a point named with the ``raise`` action raises."""


class FaultSpecError(ValueError):
    """A WAKEFUL_FAULTS entry that names no known point or action."""


def parse(spec: str) -> dict[str, tuple[str, float, int]]:
    """``"after_claim:block:2,during_scan:log"`` -> {point: (action, seconds, nth)}."""
    if spec.startswith("@"):
        with open(spec[1:], encoding="utf-8") as f:
            spec = ",".join(line.strip() for line in f if line.strip() and not line.startswith("#"))
    points: dict[str, tuple[str, float, int]] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        name, _, rest = entry.partition(":")
        action, _, nth = (rest or "log").partition(":")
        action, _, seconds = action.partition("=")
        if name not in POINTS or action not in ACTIONS:
            raise FaultSpecError(f"{ENV}: {entry!r}: points are {POINTS}, actions {ACTIONS}")
        points[name] = (action, float(seconds or 0), int(nth or 0))
    return points


_points = parse(os.environ.get(ENV, ""))
_reached: dict[str, int] = {}
_lock = threading.Lock()
# (point, context, {"wrote": bool}) while a store call runs inside ``before_commit``.
_pending: contextvars.ContextVar[tuple[str, dict[str, Any], dict[str, bool]] | None] = (
    contextvars.ContextVar("wakeful_fault_pending", default=None))
_WRITES = ("INSERT", "UPDATE", "DELETE")


def point(name: str, **context: Any) -> None:
    """A named fault point: nothing at all unless ``WAKEFUL_FAULTS`` names it."""
    spec = _points.get(name)
    if spec is None:
        return
    _reach(name, spec, context)


def _reach(name: str, spec: tuple[str, float, int], context: dict[str, Any]) -> None:
    action, seconds, nth = spec
    with _lock:
        _reached[name] = count = _reached.get(name, 0) + 1
    if nth and count != nth:
        action = "log"
    _announce(name, action, count, context)
    if action == "block":
        while True:  # until SIGKILLed; SIGSTOP/SIGCONT leaves it here
            time.sleep(3600)
    if action == "exit":
        os._exit(70)
    if action == "sleep":
        time.sleep(seconds)
    if action == "raise":
        raise FaultRaised(f"{ENV}: {name} (reach {count})")
    if action == "hold":
        release = os.environ.get(RELEASE_ENV, "")
        while not (release and os.path.exists(release)):
            time.sleep(0.02)


def _announce(name: str, action: str, count: int, context: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps({"point": name, "action": action, "n": count, "pid": os.getpid(),
                       "time": time.time(), **context}, default=str)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one small O_APPEND write: never interleaved
    finally:
        os.close(fd)


def before_commit(store: Any, name: str, **context: Any) -> AbstractContextManager[None]:
    """Reach ``name`` just before the COMMIT of the store call made inside this block.

    For points inside a store transaction: the hook is SQLAlchemy's ``commit`` event on the
    store's engine, so ``store/`` stays unaware of it. Only the first commit in the block
    that follows a write (INSERT, UPDATE, DELETE) reaches the point: a scan that found
    nothing due commits no write and passes."""
    if name not in _points:
        return _INERT
    return _armed(store, name, context)


_INERT: AbstractContextManager[None] = nullcontext()


@contextmanager
def _armed(store: Any, name: str, context: dict[str, Any]) -> Iterator[None]:
    _hook(store.engine)
    token = _pending.set((name, context, {"wrote": False}))
    try:
        yield
    finally:
        _pending.reset(token)


_hooked: set[int] = set()


def _hook(engine: Any) -> None:
    if id(engine) in _hooked:
        return
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def _on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        pending = _pending.get()
        if pending is not None and statement.lstrip().upper().startswith(_WRITES):
            pending[2]["wrote"] = True

    @event.listens_for(engine, "commit")
    def _on_commit(_conn: Any) -> None:
        pending = _pending.get()
        if pending is not None:
            name, context, state = pending
            if state["wrote"]:
                _pending.set(None)
                point(name, **context)

    _hooked.add(id(engine))


def wrap_send(send: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The outbox channel, with ``after_send_before_mark`` right after it accepted a message.
    Returned unchanged when that point is not named."""
    if "after_send_before_mark" not in _points:
        return send

    def faulty_send(message: Any) -> Any:
        result = send(message)
        point("after_send_before_mark", inbox=message.inbox, key=message.key,
              message_ids=list(message.message_ids))
        return result

    faulty_send.delivery = getattr(send, "delivery", "at-least-once")  # type: ignore[attr-defined]
    return faulty_send


# --- the hooks around the run ---------------------------------------------------------------

_installed = False


def install(app: Any) -> None:
    """Wrap this process's run in the named points (the module docstring); once, and not at
    all when ``WAKEFUL_FAULTS`` names none."""
    global _installed
    if _installed or not _points:
        return
    _installed = True
    from tasks import isolation, runtime

    runtime.STORE_HOOKS.append(_around_store)
    ingest = app.tasks["wakeful.ingest"]
    ingest.run = _around_ingest(ingest.run)
    isolation.call_agent = _around_agent_call(isolation.call_agent)


def _around_ingest(run: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    def run_with_point(requests: list[Any]) -> Any:
        point("ingest_batch", messages=len(requests))
        return run(requests)
    return run_with_point


def _around_agent_call(call_agent: Callable[..., Any]) -> Callable[..., Any]:
    from tasks import isolation, runtime

    def call_with_point(agent: Any, run: Any, **kwargs: Any) -> Any:
        if runtime.shares_process():  # the point is about runs sharing a process
            point("agent_call", inbox=run.inbox, events=[e.id for e in run.events],
                  apart=isolation.runs_apart(run))
        return call_agent(agent, run, **kwargs)
    return call_with_point


def _around_store(store: Any) -> None:
    """The store's run steps, timer scan, intake and dispatch, each with its points: wrapped
    on this one store object, so ``store/`` stays unaware."""
    runs, intake, outgoing = store.runs, store.intake, store.outgoing
    start, start_next, finish, finish_and_claim = runs.start, runs.start_next, runs.finish, runs.finish_and_claim
    run_scheduler, ingest_many, dispatch_many = store.run_scheduler, intake.ingest_many, outgoing.dispatch_many

    def claimed(inbox: str, generation: int | None, events: list[Any]) -> None:
        if events:  # logged once the claim committed, before anything may stop the process
            point("after_claim", inbox=inbox, generation=generation, events=[e.id for e in events])

    def hooked_start(inbox: str, holder: str, **kwargs: Any) -> Any:
        begun = start(inbox, holder, **kwargs)
        claimed(inbox, begun.generation, begun.events)
        return begun

    def hooked_start_next(holder: str, **kwargs: Any) -> Any:
        got = start_next(holder, **kwargs)
        if got is not None:
            claimed(got[0], got[1].generation, got[1].events)
        return got

    def finishing(step: Callable[..., Any]) -> Callable[..., Any]:
        def hooked(inbox: str, holder: str, gen: int, event_ids: Any, *args: Any, **kwargs: Any) -> Any:
            where = {"inbox": inbox, "generation": gen, "events": list(event_ids)}
            with before_commit(store, "before_finish_commit", **where):
                done = step(inbox, holder, gen, where["events"], *args, **kwargs)
            finished = done
            if not isinstance(done, bool):  # finish_and_claim's RunStep: what it claimed too
                finished = done.finished
                claimed(inbox, gen, done.events)
                if done.next is not None:
                    claimed(done.next[0], done.next[1].generation, done.next[1].events)
            point("after_finish_commit", finished=finished, **where)
            return done
        return hooked

    def hooked_run_scheduler(**kwargs: Any) -> Any:
        with before_commit(store, "during_scan"):
            return run_scheduler(**kwargs)

    def hooked_ingest_many(items: Any, **kwargs: Any) -> Any:
        items = list(items)
        with before_commit(store, "before_ingest_commit", messages=len(items)):
            return ingest_many(items, **kwargs)

    def hooked_dispatch_many(inboxes: Any, send: Callable[[Any], Any], **kwargs: Any) -> Any:
        return dispatch_many(inboxes, wrap_send(send), **kwargs)

    runs.start, runs.start_next = hooked_start, hooked_start_next
    runs.finish, runs.finish_and_claim = finishing(finish), finishing(finish_and_claim)
    store.run_scheduler = hooked_run_scheduler
    intake.ingest_many, outgoing.dispatch_many = hooked_ingest_many, hooked_dispatch_many
