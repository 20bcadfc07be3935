"""The worker process's event loop, where ``async def agent(run)`` runs.

The frameworks agents are built with are async (Pydantic AI, the OpenAI Agents SDK,
LangGraph, the MCP SDK). An async agent is accepted wherever a sync one is: the run task
calls it, gets a coroutine, and hands it to this process's one event loop (a daemon thread
started at the first async run, so a worker of sync agents never has one; a forked child
starts its own). Not a loop per run: connection pools and sessions an agent keeps at module
level live on one loop for the life of the process, as the frameworks expect.

The run task's thread waits for the coroutine's end and is what the runtime times and
fences as before: the lease keeper renews meanwhile, and a run past its deadline gets
``SoftTimeLimitExceeded`` raised in that thread (tasks/run_inbox.py), which cancels the
coroutine here. ``TryLater``, ``LeaseLost`` and any other exception the coroutine raises are
raised in the thread, as a sync agent's would be.

One blocking call in an async agent (``time.sleep``, a sync HTTP client) stalls every async
run of the process: a watchdog on the loop logs a warning naming how long the loop was held,
so it is found, not felt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

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
    import inspect

    return run(result) if inspect.isawaitable(result) else result
