"""Agents the runtime tests plug in through WAKEFUL_AGENT (imported by the worker processes)."""

from __future__ import annotations

from wakeful.agent import Run


def invalid_outcome(run: Run) -> object:
    """Returns something that is not an Outcome: the store must refuse it whole."""
    return "not an outcome"


def slow(run: Run) -> None:
    """Half a second per run, silent: long enough that a backlog outlasts one worker."""
    import time

    time.sleep(0.5)


def apart_probe(run: Run) -> object:
    """Says which process ran it, or does what its event's payload asks: ``exit`` (os._exit),
    ``hang`` (sleep), ``try_later``, ``heartbeat``, ``grant`` (tests/runtime/test_runtime_dense_faults.py)."""
    import os
    import time

    from wakeful.agent import TryLater
    from store import Outcome

    p = run.events[0].payload or {}
    if p.get("exit"):
        os._exit(13)
    if p.get("hang"):
        time.sleep(float(p["hang"]))
    if p.get("try_later"):
        raise TryLater("the model is away", after=3)
    if p.get("heartbeat"):
        run.heartbeat()
    said = run.grant(["model"], 60) if p.get("grant") else str(os.getpid())
    return Outcome(messages=[said], memory={"seen": run.memory.get("seen", 0) + 1})


async def async_probe(run: Run) -> object:
    """An ``async def`` agent: awaits (``wait`` seconds, a model call's stand-in) and says
    where it ran (process, thread, loop); or does what its payload asks: ``block`` (a blocking
    call on the loop), ``hang`` (awaits for ever, noting in ``WAKEFUL_TEST_TOOL_LOG`` that it
    was cancelled), ``exit`` (os._exit), ``try_later``."""
    import asyncio
    import os
    import threading
    import time

    from wakeful.agent import TryLater
    from store import Outcome

    p = run.events[0].payload or {}
    if p.get("block"):
        time.sleep(float(p["block"]))  # the mistake the loop's watchdog reports
    if p.get("exit"):
        os._exit(13)
    if p.get("try_later"):
        raise TryLater("the model is away", after=3)
    if p.get("hang"):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            with open(os.environ["WAKEFUL_TEST_TOOL_LOG"], "a") as log:
                log.write(f"cancelled {run.inbox}\n")
            raise
    await asyncio.sleep(float(p.get("wait", 0.1)))
    where = f"{os.getpid()} {threading.current_thread().name} {id(asyncio.get_running_loop())}"
    return Outcome(messages=[where])
