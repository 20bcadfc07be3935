"""wakeful's Celery runtime: ``celery -A tasks worker|beat|flower``.

``tasks.app`` is built, and the tasks registered, on first access, not when the package is
imported: ``tasks.settings`` reads the environment when it is first imported, and commands
such as ``wakeful demo`` must point it somewhere before that happens. Building the app
connects to nothing; the store is opened lazily in each process that uses it (after the
prefork fork).
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from tasks.application import app

        # One module per task family; importing them registers the tasks on the app.
        from tasks import approvals, effects, ingest, outbox, retention, runs, summary, sweep, timers  # noqa: F401

        return app
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
