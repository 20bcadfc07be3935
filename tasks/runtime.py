"""The store, opened lazily once per process (after the prefork fork, never before), with
a connection pool sized for the worker's pool: what this process runs at once.

A prefork child runs one task at a time: 2 connections (its task's and the lease keeper's)
and a few of overflow. A dense worker (Celery's ``threads`` pool: hundreds of runs in flight
in one process) holds a connection only inside a transaction, a few milliseconds of each
run's seconds (``store.transactions.unpinned``): ``WAKEFUL_DATABASE_POOL_SIZE`` connections, 20 by
default, kept open, carry a thousand runs in flight. No overflow: SQLAlchemy closes an
overflow connection as soon as it comes back to a pool that has its size idle, and a dense
worker's bursts opened and closed them all the time (measured: 69 PostgreSQL server processes
served one 7 s bench run of a pool of 10 + 10; docs/performance.md, "3 December, night").
"""

from __future__ import annotations

import gc
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from celery.signals import worker_init, worker_process_init, worker_ready

from store import Store

# The pool of the worker this process belongs to ("prefork", "threads", "solo" ...) and its
# concurrency, set when the worker starts; a prefork child inherits it. None outside a worker
# (a test or a bench calling a task's body): one run at a time, as in a prefork child.
_worker: dict[str, Any] = {"pool": None, "concurrency": 1}


@worker_init.connect
def _remember_the_pool(sender: Any = None, **_kwargs: Any) -> None:
    pool = getattr(sender, "pool_cls", None) or "prefork"  # its -P name, or its class
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "prefork").rpartition(".")[2]
    _worker.update(pool={"thread": "threads", "processes": "prefork"}.get(name, name),
                   concurrency=int(getattr(sender, "concurrency", 1) or 1))


# The cyclic collector of a dense worker. Its heap is the app, the SDKs and a thousand runs'
# objects, and a full collection walks all of it with the interpreter lock held, every run in
# the process stopped meanwhile. Once the worker is up, what it has loaded is frozen out of
# every later collection, and the youngest generation is collected after 50,000 net
# allocations instead of 700 (measured: docs/performance.md, 5 December).
DENSE_GC_THRESHOLDS = (50_000, 20, 100)


@worker_ready.connect
def _quiet_the_collector(**_kwargs: Any) -> None:
    if dense():
        gc.freeze()
        gc.set_threshold(*DENSE_GC_THRESHOLDS)


def dense() -> bool:
    """Whether this process carries many runs at once (the threads pool)."""
    return _worker["pool"] == "threads"


def shares_process() -> bool:
    """Whether runs in this process share it (any worker pool but prefork, whose runs each
    have a process that dies alone): a retried event then runs apart (tasks/isolation.py)."""
    return _worker["pool"] not in (None, "prefork")


def pool_sizes() -> tuple[int, int]:
    """(pool_size, max_overflow) for this process's store."""
    if not dense():
        return 2, 4
    # The app is imported where its settings are read, not by this module: a run apart's
    # fork server imports it, and the app sets up traces for the role it reads from argv.
    from tasks.application import runtime_settings

    return runtime_settings().database_pool_size or min(20, _worker["concurrency"]), 0

_lock = threading.Lock()
_store: Store | None = None
_pid: int | None = None
# Stores inherited across a fork are kept referenced, never closed or collected: closing
# would send a goodbye on a socket the parent still uses.
_inherited: list[Store] = []


# What is wrapped around each store a process opens: the fault points' hooks
# (tasks/faults.py), when WAKEFUL_FAULTS names any; otherwise nothing.
STORE_HOOKS: list[Callable[[Store], None]] = []


def get_store() -> Store:
    """This process's Store. A child forked from a parent that had one opens its own."""
    global _store, _pid
    if _store is not None and _pid == os.getpid():
        return _store
    with _lock:
        if _store is None or _pid != os.getpid():
            if _store is not None:
                _inherited.append(_store)
            size, overflow = pool_sizes()
            from tasks.application import runtime_settings  # not at import: see pool_sizes

            settings = runtime_settings()
            _store = Store.connect(settings.store_url, pool_size=size, max_overflow=overflow,
                                   **settings.store_options())
            for hook in STORE_HOOKS:
                hook(_store)
            _pid = os.getpid()
        return _store


@worker_process_init.connect
def _fresh_store_in_child(**_kwargs: Any) -> None:
    # Never use a connection opened before the fork: measured, it gave psycopg protocol
    # errors and ambiguous commits (rows committed while the task reported failure). The
    # store is created on first use in this child.
    forget_store()


def forget_store() -> None:
    """Drop a store inherited across fork without closing the parent's connections."""
    global _store, _pid
    with _lock:
        if _store is not None and _pid != os.getpid():
            _inherited.append(_store)
            _store = None
            _pid = None


def holder_name(task_id: str | None) -> str:
    """Who holds a lease: host, process and task, so an operator can find (and kill) it."""
    return f"{socket.gethostname()}:{os.getpid()}:{task_id or 'local'}"
