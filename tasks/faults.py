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

The points (``POINTS``) sit in ``tasks/`` only; ``store/`` knows nothing of them. The two that
lie inside a store transaction (``before_finish_commit``, ``during_scan``) are reached from
SQLAlchemy's ``commit`` event on the worker's own engine, which fires just before COMMIT is
sent: a process killed there leaves an open transaction that PostgreSQL rolls back.

With ``WAKEFUL_FAULTS`` unset, a point costs one dict lookup.
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


def active() -> bool:
    return bool(_points)


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
