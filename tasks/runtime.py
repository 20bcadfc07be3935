"""The store, opened lazily once per process (after the prefork fork, never before)."""

from __future__ import annotations

import os
import socket
import threading

from store import Store

from tasks.settings import settings

_lock = threading.Lock()
_store: Store | None = None
_pid: int | None = None
# Stores inherited across a fork are kept referenced, never closed or collected: closing
# would send a goodbye on a socket the parent still uses.
_inherited: list[Store] = []


def get_store() -> Store:
    """This process's Store. A child forked from a parent that had one opens its own."""
    global _store, _pid
    if _store is not None and _pid == os.getpid():
        return _store
    with _lock:
        if _store is None or _pid != os.getpid():
            if _store is not None:
                _inherited.append(_store)
            _store = Store.connect(settings.store_url, **settings.store_options())
            _pid = os.getpid()
        return _store


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
