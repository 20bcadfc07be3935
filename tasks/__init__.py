"""wakeful's Celery runtime: ``celery -A tasks worker|beat|flower``.

``tasks.app`` is built, and the tasks registered, on first access, not when the package is
imported. Building the app reads and connects to nothing: its settings are loaded from the
environment on the first read of its configuration (tasks/application.py), so commands such
as ``wakeful demo`` can point the environment somewhere first; the store is opened lazily
in each process that uses it (after the prefork fork).
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from tasks.application import app

        # One module per task family; importing them registers the tasks on the app.
        from tasks import approvals, effects, ingest, outbox, retention, run_inbox, summary, sweep, timers  # noqa: F401
        from tasks import faults

        faults.install(app)  # the fault tests' points, hooked around the run; nothing unless named
        return app
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
