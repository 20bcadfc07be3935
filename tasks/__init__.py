"""wakeful's Celery runtime: ``celery -A tasks worker|beat|flower``.

Importing this package builds the Celery app and registers the tasks; it connects to
nothing. The store is opened lazily in each process that uses it (after the prefork fork).
"""

from tasks.app import app

# Registering the tasks: one module per task family.
from tasks import approvals, ingest, outbox, retention, runs, sweep, timers  # noqa: E402,F401

__all__ = ["app"]
