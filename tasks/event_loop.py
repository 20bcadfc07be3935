"""The worker process's event loop, where ``async def agent(run)`` runs.

The frameworks agents are built with are async (Pydantic AI, the OpenAI Agents SDK,
LangGraph, the MCP SDK). An async agent is accepted wherever a sync one is: the run task
calls it, gets a coroutine, and hands it to this process's one event loop (a daemon thread
started at the first async run, so a worker of sync agents never has one; a forked child
starts its own). Not a loop per run: connection pools and sessions an agent keeps at module
level live on one loop for the life of the process, as the frameworks expect.

**The async run path** (``serve``): where the store has a loop engine (PostgreSQL) and the
pool is dense, an async agent's whole run task runs here, not only its coroutine. The run
task's code is the sync code every run uses (tasks/run_inbox.py), run in a greenlet on this
loop (SQLAlchemy's ``greenlet_spawn``): each store call it makes awaits on psycopg's async
connections (store/transactions.py), the agent's coroutine is awaited in the same task, and
no thread carries the run meanwhile, so a thousand runs in flight are a thousand tasks on one
thread, not a thousand threads taking turns at the interpreter lock and the connection pool.
The Celery thread that received the ring only waits for the task's end (Flower shows its
summary as before). A run past its deadline has its task cancelled (``canceller``), which
the run sees as ``SoftTimeLimitExceeded``, as a thread's run does.

Elsewhere (SQLite, a prefork child, an agent called outside a run task) the run task's
thread waits for the coroutine as before: ``outcome_of`` hands it to this loop and waits, and
a deadline's ``SoftTimeLimitExceeded`` raised in that thread cancels it. ``TryLater``,
``LeaseLost`` and any other exception the coroutine raises are raised in the run's code, as
a sync agent's would be.

One blocking call in an async agent (``time.sleep``, a sync HTTP client) stalls every async
run of the process: a watchdog on the loop logs a warning naming how long the loop was held,
so it is found, not felt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.util.concurrency import await_, greenlet_spawn, in_greenlet

log = logging.getLogger("wakeful.runs")
T = TypeVar("T")

# Seconds between the watchdog's ticks, and how late a tick may be before it warns: asyncio's
# own slow-callback threshold in debug mode is 0.1 s; debug mode costs every callback, a tick
# twice a second costs nothing measurable.
WATCH_EVERY = 0.5
HELD_TOO_LONG = 0.25
# How often the waiting thread looks up from the coroutine: the deadline's exception (raised
# asynchronously in this thread by the lease keeper) lands between two looks.
LOOK_EVERY = 1.0

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid: int | None = None


# The reason a run's task is cancelled with when it passes its deadline: told apart from a
# cancellation for any other reason (the worker shutting down), which ends the task as is.
PAST_DEADLINE = "wakeful: the run passed its deadline"


def is_async(agent: Any) -> bool:
    """An ``async def`` agent (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(getattr(agent, "__call__", None))


def serve(body: Callable[[], T]) -> T:
    """Run the sync ``body`` (a run task's code) in a greenlet on this process's loop, in the
    calling thread's context (its trace), and wait for its result."""
    return run(greenlet_spawn(contextvars.copy_context().run, body))


def on_loop() -> bool:
    """Whether this code runs inside ``serve`` (a greenlet on the loop)."""
    return in_greenlet()


def canceller() -> Callable[[], None]:
    """Inside ``serve``: a callable, safe from any thread, that ends this task's current wait
    with ``SoftTimeLimitExceeded`` (the lease keeper's, at the run's deadline)."""
    task, here = asyncio.current_task(), asyncio.get_running_loop()
    assert task is not None
    return lambda: here.call_soon_threadsafe(task.cancel, PAST_DEADLINE)


def wait_for(awaitable: Awaitable[T]) -> T:
    """Inside ``serve``: the awaitable's result, the loop serving other runs meanwhile."""
    try:
        return await_(awaitable)
    except asyncio.CancelledError as exc:
        if exc.args != (PAST_DEADLINE,):
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # handled here: the run's finish still awaits its commit
        raise SoftTimeLimitExceeded(PAST_DEADLINE) from None


def pause(seconds: float) -> None:
    """``time.sleep`` that, inside ``serve``, lets the loop's other runs go on."""
    if on_loop():
        wait_for(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def run(coroutine: Awaitable[T]) -> T:
    """Run ``coroutine`` on this process's loop and wait for its result (or exception)."""
    future = asyncio.run_coroutine_threadsafe(as_coroutine(coroutine), loop())
    try:
        while True:
            done, _ = concurrent.futures.wait([future], timeout=LOOK_EVERY)
            if done:
                return future.result()
    except BaseException:
        future.cancel()  # the deadline, or the worker shutting down: the coroutine ends too
        raise


async def as_coroutine(awaitable: Awaitable[T]) -> T:
    """Any awaitable as the coroutine ``asyncio`` schedules."""
    return await awaitable


def loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use (again in a forked child)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid():
            _loop, _pid = asyncio.new_event_loop(), os.getpid()
            started = threading.Event()
            threading.Thread(target=_serve, args=(_loop, started), name="wakeful-async-agents",
                             daemon=True).start()
            started.wait()
        return _loop


def _serve(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.create_task(_watch())
    loop.call_soon(started.set)
    loop.run_forever()


async def _watch() -> None:
    while True:
        before = time.monotonic()
        await asyncio.sleep(WATCH_EVERY)
        held = time.monotonic() - before - WATCH_EVERY
        if held > HELD_TOO_LONG:
            log.warning("the event loop of async agents was held for %.2f s: an async agent made a "
                        "blocking call (time.sleep, a sync client, CPU work), and every async run of "
                        "this process waited", held)


def outcome_of(result: Any) -> Any:
    """An agent's return value, awaited on this process's loop when it is a coroutine."""
    if not inspect.isawaitable(result):
        return result
    return wait_for(result) if on_loop() else run(result)
