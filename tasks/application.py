"""The Celery app. Creating it connects to nothing; the store is opened lazily per process."""

from __future__ import annotations

import os
import sys

from celery import Celery
from celery.signals import beat_init, celeryd_init, worker_process_init

from tasks import embedded, redis_guard
from tasks.celeryconfig import QUEUES, celery_config
from tasks.settings import settings

def refuse_open_flower(argv: list[str], env: dict[str, str] | os._Environ) -> None:
    """``celery -A tasks flower`` without authentication stops here, before Flower starts:
    Flower is open by default and its API can run, revoke and terminate tasks. (``wakeful
    flower`` checks the credentials themselves and passes them on.)"""
    if "flower" not in argv[1:] or not os.path.basename(argv[0]).startswith(("celery", "__main__")):
        return
    given = any(a.startswith(("--basic-auth", "--basic_auth", "--auth", "--auth-provider",
                              "--auth_provider")) for a in argv)
    if not (given or env.get("FLOWER_BASIC_AUTH") or env.get("FLOWER_AUTH")):
        raise SystemExit("wakeful: refusing to start Flower without authentication; use "
                         "`wakeful flower` with WAKEFUL_FLOWER_BASIC_AUTH=user:password")


refuse_open_flower(sys.argv, os.environ)

# Every task's messages are checked before Celery builds a request from them, and the
# consumer records and drops what fails (tasks/guard.py: one bad message must never stop
# a worker).
app = Celery("wakeful", task_cls="tasks.guard:GuardedTask")
app.config_from_object(celery_config(settings))

if settings.embedded_broker:
    embedded.configure(settings.embedded_poll_interval)
elif settings.broker.startswith(("redis://", "rediss://", "redis+socket://")):
    redis_guard.install()


@celeryd_init.connect
@beat_init.connect
def _init_embedded(**_kwargs) -> None:
    # `wakeful up` and `wakeful demo` do this before starting anything; a process started
    # by hand (celery -A tasks worker) does it too, retrying if it races another. Only the
    # embedded SQLite store is migrated here: PostgreSQL is migrated once, by `wakeful init`
    # (compose's `init` service), never by every worker that starts.
    if settings.store_url.startswith("sqlite"):
        embedded.migrate_store(settings.store_url, settings.store_options())
    if settings.embedded_broker:
        embedded.init(app, QUEUES)


@worker_process_init.connect
def _fresh_store_in_child(**_kwargs) -> None:
    # Never use a connection opened before the fork (FIELD-NOTES: protocol errors and
    # ambiguous commits). The store is created on first use in this child.
    from tasks.runtime import forget_store

    forget_store()
