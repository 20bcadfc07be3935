"""Where a run's agent call runs (issue 22: fault isolation where runs share a process).

``call_agent(agent, run)`` is the one place the run task calls the agent.

In a prefork worker each run has a pool process of its own: an agent that kills its process
(``os._exit``, a segfault, the OOM killer) takes only its own run down, and the pool starts
another process. In a dense worker (Celery's threads pool; gevent and eventlet alike; solo,
whose one process is the worker) runs share the worker's process and its fate: one crash
loses every run in flight there. Their events come back (the store counts the lost attempt),
and the one that crashed the process is among them; run again side by side, it would spend
its neighbours' attempts each time until they all reach the cap together.

So **a retried event runs apart**. The claim already hands a retried event (attempts > 0 at
claim, ``attempts >= 2`` here since the claim counts itself) back alone (store/claims.py);
here that batch's agent call runs in a process of its own, and the worker's process only
waits for it. A child that dies fails the run like an exception ("the run's process died
(signal 9 SIGKILL)"): the attempt counts, the event backs off, and at the cap it alone is
dead. Fresh batches (attempts 1) run in the task's thread as before: nothing on the hot path.

How the child is made: ``multiprocessing``'s **forkserver**. The worker never forks itself
(it runs threads: a forked copy can inherit a lock held by another thread, and pooled
database connections); the fork server is a single-threaded process started once per worker
process on the first run apart, with the agent's module, the store's records and this module
already imported, and every child is a fork of it: tens of times cheaper than spawn (a
fresh interpreter importing everything again, per run), which matters after a crash with
200 runs in flight, 200 retries at once; a forked child shares the server's pages
copy-on-write (``_measure`` below; docs/performance.md, "Measurements behind the design").

What crosses the boundary is data only: the agent itself (pickled by reference, as
``module:callable`` is imported), the Run's inbox, events, generation and memory, and back
the Outcome or the exception (itself when it pickles, ``TryLater`` and ``LeaseLost``
included, so the runtime treats it as if raised in its thread; else a RuntimeError naming
its type and message). ``run.heartbeat()``, ``run.grant()``, ``run.timers()`` and the
budget hooks (``check_budget``, ``count_spend``) in the child are requests over the same pipe,
served by the waiting thread with the Run's own callables: the lease stays the parent's
(renewed by its lease keeper meanwhile, fenced by its holder and generation), and the child
opens no database connection. The child's traceback rides along as a note.

The waiting thread kills the child when the run's deadline passes (``deadline``, a
``time.monotonic()``; without one, ``WAKEFUL_RUN_TIME_LIMIT`` from the call) and raises
``SoftTimeLimitExceeded`` as a time limit does. A child outlives no worker: the fork server
exits with its worker, and a child whose parent is gone exits too. At most ``MAX_APART`` runs apart are in flight per worker process
(each holds a process); the rest wait for a slot, holding their lease.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from wakeful import telemetry
from store import Outcome

from wakeful.agent import Agent, Run
from tasks import event_loop, runtime

log = logging.getLogger("wakeful.runs")

# Runs apart in flight per worker process. A process each (a fork of the server: ~5 MB of
# its own); a worker that lost N runs in a crash gets N retries back, and this keeps them
# from becoming N processes at once.
MAX_APART = 32

_slots = threading.BoundedSemaphore(MAX_APART)
_context: Any = None
_context_lock = threading.Lock()

# What the fork server imports once, so its children need not: the worker's main module
# (multiprocessing's default: else every child runs the `celery` script again to set up its
# __main__), this module (the child's code), the store's records and the agent interface.
PRELOAD = ["__main__", "tasks.isolation", "store", "wakeful.agent"]

def call_agent(agent: Agent, run: Run, *, deadline: float | None = None) -> Outcome | None:
    """The agent's answer to ``run``: in this thread, or for a retried batch in a process
    shared with other runs, from a process of its own (see the module docstring).
    ``deadline`` (a ``time.monotonic()``) is when a run apart is killed."""
    if not runs_apart(run):
        return event_loop.outcome_of(agent(run))  # an async agent's coroutine runs on the process's loop
    try:
        pickled = pickle.dumps(agent)
    except Exception as exc:  # noqa: BLE001 - e.g. a closure: it can only run here
        log.warning("inbox %r: the agent cannot be sent to a process of its own (%s); "
                    "running the retried batch in the worker's process", run.inbox, exc)
        return event_loop.outcome_of(agent(run))
    if deadline is None:
        from tasks.application import runtime_settings

        deadline = time.monotonic() + runtime_settings().run_time_limit
    if not _slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
        raise SoftTimeLimitExceeded("the run passed its deadline waiting for a process of its own")
    try:
        return _run_apart(pickled, run, deadline, getattr(agent, "__module__", None))
    finally:
        _slots.release()


def runs_apart(run: Run) -> bool:
    """A retried batch (its event claimed before) where runs share the process."""
    return runtime.shares_process() and any(e.attempts >= 2 for e in run.events)


# --- the waiting thread -------------------------------------------------------------------
@dataclass(frozen=True)
class _Request:
    """What the child sends: a call of the Run's ``heartbeat`` or ``mint_grant``, or the end."""

    kind: str  # "heartbeat", "grant", "timers", "check_budget", "count_spend", "outcome", "error"
    value: Any = None


def _context_for_children(agent_module: str | None) -> Any:
    """The fork server's context, made on the first run apart (with the agent's module in
    its preload: an SDK imported once, not per run)."""
    global _context
    with _context_lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD + ([agent_module] if agent_module else []))
            _context = ctx
        return _context


def _run_apart(pickled: bytes, run: Run, deadline: float, agent_module: str | None) -> Outcome | None:
    ctx = _context_for_children(agent_module)
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_child, name=f"wakeful-apart-{run.inbox}"[:60], daemon=False,
                        args=(theirs, pickled, run.inbox, run.events, run.generation, run.memory,
                              telemetry.headers()))
    child.start()
    theirs.close()
    try:
        return _serve_child(child, ours, run, deadline)
    finally:
        ours.close()
        if child.is_alive():
            child.kill()
        child.join(timeout=10)
        child.close()


def _serve_child(child: Any, conn: Any, run: Run, deadline: float) -> Outcome | None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            raise SoftTimeLimitExceeded(f"the run passed its deadline; its process (pid {child.pid}) was killed")
        ready = multiprocessing.connection.wait([conn, child.sentinel], timeout=min(left, 1.0))
        if not ready:
            continue
        # Its last words first: a child that answered and exited is ready on both.
        try:
            request = conn.recv() if conn.poll() else None
            gone = request is None and child.sentinel in ready
        except (EOFError, OSError):
            request, gone = None, True  # it died writing, or before: its exit code says how
        if gone:
            child.join(timeout=10)
            raise RuntimeError(f"the run's process died ({_how(child.exitcode)})")
        if request is not None:
            done, value = _answer(request, run, conn)
            if done:
                return value


def _answer(request: _Request, run: Run, conn: Any) -> tuple[bool, Any]:
    """Serve one request; (True, outcome) at the end (an error is raised here)."""
    if request.kind == "outcome":
        return True, request.value
    if request.kind == "error":
        raise _exception(request.value)
    try:
        if request.kind == "heartbeat":
            reply: Any = ("ok", run._heartbeat())
        elif request.kind == "check_budget":
            reply = ("ok", run._check_budget(*request.value))
        elif request.kind == "count_spend":
            reply = ("ok", run._count_spend(*request.value))
        elif request.kind == "timers":
            reply = ("ok", run._timers())
        else:
            reply = ("ok", run._mint_grant(*request.value))
    except Exception as exc:  # noqa: BLE001 - the child's call raises it, as it would here
        reply = ("raise", _pickled_exception(exc))
    try:
        conn.send(reply)
    except (BrokenPipeError, OSError):
        pass  # the child is gone; its sentinel says so next
    return False, None


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"signal {-exitcode} {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _pickled_exception(exc: BaseException) -> tuple[bytes | None, str, str]:
    """An exception as it crosses the pipe: itself when it pickles, else its type and text."""
    try:
        data: bytes | None = pickle.dumps(exc)
        pickle.loads(data)  # an exception whose constructor takes other arguments fails here
    except Exception:  # noqa: BLE001
        data = None
    return data, type(exc).__name__, str(exc)


def _exception(value: tuple[bytes | None, str, str]) -> BaseException:
    data, name, text = value
    if data is not None:
        try:
            exc = pickle.loads(data)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001 - its class is not importable here
            pass
    return RuntimeError(f"{name}: {text}")


# --- the child ------------------------------------------------------------------------------
def _child(conn: Any, pickled: bytes, inbox: str, events: list[Any], generation: int,
           memory: dict[str, Any], trace: dict[str, str] | None = None) -> None:
    # The agent's spans join the run's trace (docs/operating.md "Traces"), and are flushed
    # before the answer: the worker may kill this process once it has it.
    if trace and telemetry.setup("apart"):
        with telemetry.continued(trace):
            _run_child(conn, pickled, inbox, events, generation, memory, telemetry.flush)
    else:
        _run_child(conn, pickled, inbox, events, generation, memory, lambda: None)


def _run_child(conn: Any, pickled: bytes, inbox: str, events: list[Any], generation: int,
               memory: dict[str, Any], flush: Any) -> None:
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    lock = threading.Lock()  # the agent may heartbeat from several threads of its own

    def ask(kind: str, value: Any = None) -> Any:
        with lock:
            conn.send(_Request(kind, value))
            status, answer = conn.recv()
        if status == "raise":
            raise _exception(answer)
        return answer

    try:
        agent = pickle.loads(pickled)
        run = Run(inbox=inbox, events=events, generation=generation, memory=memory,
                  _heartbeat=lambda: ask("heartbeat"),
                  _mint_grant=lambda routes, ttl: ask("grant", (routes, ttl)),
                  _timers=lambda: ask("timers"),
                  _check_budget=lambda budget: ask("check_budget", (budget,)),
                  _count_spend=lambda budget, usage: ask("count_spend", (budget, usage)))
        outcome = agent(run)
        if inspect.isawaitable(outcome):  # an async agent: this process is its own, so is the loop
            outcome = asyncio.run(event_loop.as_coroutine(outcome))
        reply = _Request("outcome", outcome)
        try:
            pickle.dumps(outcome)
        except Exception as exc:  # noqa: BLE001 - as the store refuses what is not an Outcome
            reply = _Request("error", (None, "InvalidOutcome", f"the agent's outcome cannot be sent back: {exc}"))
    except BaseException as exc:  # noqa: BLE001 - everything the agent raised goes back
        exc.add_note(f"in the run's own process (pid {os.getpid()}):\n"
                     + "".join(traceback.format_exception(exc)))
        reply = _Request("error", _pickled_exception(exc))
    flush()
    with lock:
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            os._exit(1)  # the worker is gone: nobody to answer


def _exit_with_parent(parent: int) -> None:
    """The fork server exits when its worker dies; a child whose agent hangs follows it."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _measure(n: int = 20) -> None:
    """What a run apart costs (``python -c "import tasks.isolation as i; i._measure()"``), per way of making the child."""
    import tasks.isolation as isolation
    from store import Event

    runtime._worker["pool"] = "threads"
    run = Run(inbox="measure", events=[Event(1, "measure", "x", "1", {}, "running", 2)],
              generation=1, memory={})
    for method in ("forkserver", "spawn"):
        isolation._context = multiprocessing.get_context(method)
        if method == "forkserver":
            isolation._context.set_forkserver_preload(PRELOAD)
        isolation.call_agent(isolation._noop_agent, run)  # a fork server starts once
        cpu, wall = time.process_time(), time.monotonic()
        for _ in range(n):
            isolation.call_agent(isolation._noop_agent, run)
        print(f"{method}: {(time.monotonic() - wall) / n * 1000:.1f} ms wall per run apart, "
              f"{(time.process_time() - cpu) / n * 1000:.1f} ms of the worker's CPU")


def _noop_agent(run: Run) -> Outcome:
    return Outcome()

