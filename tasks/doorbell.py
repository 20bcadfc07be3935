"""The doorbell: a Celery message that only says "look at inbox X".

Ringing never raises. The event is already stored when we ring; if the broker is down the
ring is lost and the sweep (``wakeful.sweep``) rings again for every inbox with work and no
live lease. So a broker error is logged, not handed to the caller (a webhook must still get
its fast 2xx once the event is stored).

On Redis, rings are coalesced: a message is sent only when no run task is queued that has not
started yet. The marker is a counter: a ring increments it and sends a message only if it was
the first; the task reads and deletes it as it starts. A task whose marker counted rings
besides its own drains: once its own inbox is idle it takes the inbox with the oldest ready
event straight from the database (``tasks/run_inbox.py``, ``store/backlog.py``) until none is left,
and each inbox it takes rings again (coalesced, draining), so idle workers join in while a
backlog lasts. A skipped ring is safe: its event was committed before the counter moved, so
the queued task, which starts after that, finds it. A task that stands for its own ring alone
serves its inbox and ends (no empty look at the backlog on an idle system). An idle system
still gets one message per ring at once (the latency path); a busy one gets about one per
free worker (the throughput path), instead of a message per wake that costs the broker as
much as the wake costs the store.

A draining task recruits another (``ring_backlog``) with a message that says so (its
``lane``): the recruit skips the inbox named, which its ringer has just taken, and goes
straight to the backlog. A dense worker's recruits coalesce on ``RECRUIT_LANES`` markers
instead of one, so that many recruits can be on their way at once: with one, a burst's runs
started one broker round trip apart.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from typing import Any

from tasks import runtime
from tasks.application import app, runtime_settings
from tasks.celeryconfig import OUTBOX_QUEUE, RUNS_QUEUE

log = logging.getLogger("wakeful.doorbell")

# A broker blip is retried briefly; a broker outage is left to the sweep. ignore_result=True
# on every ring: otherwise send_task subscribes to the result backend first, and with Redis
# down that alone retries for a long time before the ring can fail.
_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}

# The marker: "a run task is queued and has not started". Its expiry bounds how long rings
# are skipped on the strength of one queued message (one stuck in a worker that died, say):
# past it the next ring sends a message of its own.
QUEUED_MARKER = f"wakeful:{RUNS_QUEUE}:queued"

# Per inbox: "a sweep's ring for it is queued and has not started". A queued sweep ring
# stands for the next sweeps' until its task starts (``swept_started``); one that expired
# unstarted, behind busy workers, holds the inbox's next ring back for SWEPT_HOLDS of its
# lifetimes. Rung anew every sweep instead, a short interval over hundreds of stale inboxes
# (a dense worker killed with 300 runs in flight, the sweep every 0.5 s) queued rings faster
# than a worker could even drop the expired ones, and every ring expired in the queue: a
# livelock (tests/runtime/test_runtime_dense_faults.py at WAKEFUL_TEST_DENSE_SCALE=300).
SWEPT_PREFIX = f"wakeful:{RUNS_QUEUE}:swept:"
SWEPT_HOLDS = 10

# How many recruits a dense worker's drainers may have on their way at once. A recruit
# starts a run (its take) one broker round trip after it is rung, so on one marker a burst's
# runs start one round trip apart (docs/performance.md, "Measurements behind the design").
# Each lane costs at most one queued message, so this bounds the messages too.
RECRUIT_LANES = 16


def lane_marker(lane: int | None) -> str:
    """The marker of a lane; lane 0 (and a plain ring's None) is the one every ring uses."""
    return QUEUED_MARKER if not lane else f"{QUEUED_MARKER}:{lane}"


def ring(inbox: str, expires: float | None = None, drain: bool = False, lane: int | None = None) -> None:
    """Ask a worker to run ``inbox``. Never raises; the sweep covers a lost ring.

    ``expires`` (seconds): a ring still queued after that long is dropped unrun. The sweep
    uses it, so its rings for inboxes stuck behind busy workers never pile up beyond one
    sweep's worth: the next sweep rings again if the work is still there. Such rings are
    never coalesced (a ring that may be dropped cannot stand for others).

    ``drain``: once ``inbox`` is idle, the task goes on with the backlog straight from the
    database. A task drains anyway when other rings were coalesced onto it.

    ``lane``: a recruit's ring (``ring_backlog``): the task goes to the backlog at once.
    """
    marker = _marker() if expires is None else None
    if marker is not None:
        try:
            if _count_ring(marker, lane_marker(lane)) > 1:
                return  # a queued task will drain this inbox's event
        except Exception as exc:  # Redis down: the send below fails and says so
            log.warning("doorbell marker not set (%s: %s); ringing uncoalesced", type(exc).__name__, exc)
            marker = None
    if not _send(inbox, expires, drain, lane) and marker is not None:
        started(lane)  # no message stands behind the marker: let the next ring try again


def ring_many(inboxes: Iterable[str], expires: float | None = None, drain: bool = False) -> int:
    """Ring each inbox once, in order; the number of inboxes. Coalesced, one ring stands for
    them all: whichever task it finds queued, or sends, drains every ready inbox."""
    names = list(dict.fromkeys(inboxes))
    if names and expires is None and _marker() is not None:
        ring(names[0], drain=len(names) > 1)
        return len(names)
    for inbox in names if expires is None else _without_a_queued_ring(names, expires):
        ring(inbox, expires=expires, drain=drain)
    return len(names)


def _without_a_queued_ring(names: list[str], expires: float) -> list[str]:
    """Of ``names``, those with no sweep ring queued (``SWEPT_PREFIX``), each now marked; all
    of them when Redis cannot say (the embedded broker, or Redis away: the send fails and
    says so)."""
    marker = _marker()
    if marker is None:
        return names
    try:
        with marker.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.set(SWEPT_PREFIX + name, 1, nx=True, px=int(expires * SWEPT_HOLDS * 1000))
            fresh = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - ringing too often beats not ringing
        log.warning("sweep markers not set (%s: %s); ringing every inbox", type(exc).__name__, exc)
        return names
    return [name for name, marked in zip(names, fresh) if marked]


def swept_started(inbox: str) -> None:
    """A sweep's ring for ``inbox`` started: the next sweep may ring it again."""
    marker = _marker()
    if marker is not None:
        try:
            marker.delete(SWEPT_PREFIX + inbox)
        except Exception as exc:  # noqa: BLE001 - the marker expires on its own
            log.warning("sweep marker not cleared (%s: %s)", type(exc).__name__, exc)


def ring_backlog(inbox: str) -> None:
    """From a draining task that just took ``inbox``: make sure another task is queued to
    join in (coalesced: nothing is sent while one is on the lane; the one sent drains).
    Without coalescing the sweep's rings, one per inbox, are the other drainers."""
    if _marker() is not None:
        ring(inbox, drain=True, lane=zlib.crc32(inbox.encode()) % RECRUIT_LANES if runtime.dense() else 0)


def started(lane: int | None = None) -> bool:
    """Called by a run task as it starts: the next ring on its lane sends a message again.
    True when rings besides the task's own were coalesced onto it while it was queued: it
    must drain."""
    marker = _marker()
    if marker is None:
        return False
    try:
        pipe = marker.pipeline(transaction=True)  # GET and DEL as one (GETDEL needs Redis 6.2)
        pipe.get(lane_marker(lane))
        pipe.delete(lane_marker(lane))
        return int(pipe.execute()[0] or 0) > 1
    except Exception as exc:  # the marker expires anyway; drain, to be safe
        log.warning("doorbell marker not read (%s: %s)", type(exc).__name__, exc)
        return True


# Dispatch rings coalesce like run rings: the inboxes rung while a dispatch task is queued
# unstarted are added to a set, and that task, as it starts, takes the set and tries them
# all. A burst of runs that each wrote a reply then costs a handful of dispatch tasks, not one
# per run. The set outlives the marker: a ring left in it by a task that never started is
# taken by the next one (and its messages are due for the beat tick's dispatch anyway).
DISPATCH_MARKER = f"wakeful:{OUTBOX_QUEUE}:queued"
DISPATCH_RUNG = f"wakeful:{OUTBOX_QUEUE}:rung"
_RING_DISPATCH = """
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""


def ring_dispatch(inbox: str) -> None:
    """Ask for ``inbox``'s held messages to be sent now (the gap still applies)."""
    kwargs: dict[str, Any] = {"inbox": inbox}
    marker = _marker()
    if marker is not None:
        try:
            if _ring_dispatch(marker, inbox) > 1:
                return  # the queued dispatch task takes this inbox with the others rung
            kwargs["rung"] = True
        except Exception as exc:  # Redis down: the send below fails and says so
            log.warning("dispatch marker not set (%s: %s); ringing uncoalesced", type(exc).__name__, exc)
    try:
        app.send_task("wakeful.dispatch_outbox", kwargs=kwargs, queue=OUTBOX_QUEUE,
                      ignore_result=True, retry=True, retry_policy=_RETRY)
    except Exception as exc:
        log.warning("dispatch for inbox %r not sent (%s: %s); the next tick sends it",
                    inbox, type(exc).__name__, exc)
        if "rung" in kwargs:
            dispatch_started()  # no message stands behind the marker: let the next ring try again


def dispatch_started() -> list[str]:
    """Called by a coalesced dispatch task as it starts: the inboxes rung meanwhile (the next
    ring sends a message again)."""
    marker = _marker()
    if marker is None:
        return []
    try:
        pipe = marker.pipeline(transaction=True)
        pipe.delete(DISPATCH_MARKER)
        pipe.smembers(DISPATCH_RUNG)
        pipe.delete(DISPATCH_RUNG)
        return sorted(name.decode() for name in pipe.execute()[1])
    except Exception as exc:  # the beat tick sends what is due
        log.warning("dispatch marker not read (%s: %s)", type(exc).__name__, exc)
        return []


def _send(inbox: str, expires: float | None, drain: bool, lane: int | None) -> bool:
    kwargs: dict[str, Any] = {"drain": True} if drain else {}
    if lane is not None:
        kwargs["lane"] = lane
    try:
        app.send_task("wakeful.run_inbox", args=[inbox], kwargs=kwargs or None,
                      queue=RUNS_QUEUE, expires=expires, ignore_result=True, retry=True,
                      retry_policy=_RETRY)
        return True
    except Exception as exc:
        log.warning("doorbell for inbox %r not sent (%s: %s); the sweep will ring it",
                    inbox, type(exc).__name__, exc)
        return False


# The ring's count and, for the first ring, the marker's expiry, in one atomic command: a
# process that died between the two would leave a marker without one, and every later ring
# would be skipped. A script rather than a pipeline of SET NX PX and INCR: half the client's
# CPU, and a draining task rings once per inbox it takes.
_COUNT_RING = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""
_count_script: Any = None


def _count_ring(marker: Any, key: str) -> int:
    global _count_script
    if _count_script is None:
        _count_script = marker.register_script(_COUNT_RING)
    return int(_count_script(keys=[key], args=[int(runtime_settings().doorbell_coalesce_seconds * 1000)]))


_dispatch_script: Any = None


def _ring_dispatch(marker: Any, inbox: str) -> int:
    global _dispatch_script
    if _dispatch_script is None:
        _dispatch_script = marker.register_script(_RING_DISPATCH)
    settings = runtime_settings()
    coalesce_ms = int(settings.doorbell_coalesce_seconds * 1000)
    return int(_dispatch_script(keys=[DISPATCH_MARKER, DISPATCH_RUNG],
                                args=[coalesce_ms, inbox, max(coalesce_ms, int(settings.dispatch_interval * 2000))]))


_client: Any = None


def _marker() -> Any:
    """The broker's Redis (redis-py resets its pool in a forked child), or None: the embedded
    broker and other transports send one message per ring, and so does a runtime that does
    not drain (only draining tasks make a skipped ring safe)."""
    global _client
    if _client is None:
        settings = runtime_settings()
        coalesce = settings.doorbell_coalesce_seconds > 0 and settings.drain_seconds > 0
        if not coalesce or settings.redis_url is None:
            _client = False
        else:
            import redis

            # A blocking pool: a dense worker's hundreds of threads ring at once, and a ring
            # takes well under a millisecond, so 50 connections serve them and the rest wait
            # their turn (redis-py's default pool raises past its maximum instead).
            pool = redis.BlockingConnectionPool.from_url(settings.redis_url, max_connections=50,
                                                         timeout=settings.redis_socket_timeout,
                                                         socket_timeout=settings.redis_socket_timeout,
                                                         socket_connect_timeout=5)
            _client = redis.Redis(connection_pool=pool)
    return _client or None
