"""The Celery app. Creating it reads and connects to nothing: the runtime settings are loaded
with Celery's configuration, when it is first needed, and the store is opened lazily per process."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import click
from celery import Celery
from celery.signals import beat_init, celeryd_init

from wakeful import telemetry
from wakeful.same_user import closed_to_same_user
from wakeful.settings import RuntimeSettings, for_process
from tasks import embedded, redis_clients, redis_guard
from tasks.celeryconfig import QUEUES, celery_config


def refuse_open_flower(options: object, env: Mapping[str, str]) -> None:
    """Stop a Flower that would start without authentication: Flower is open by default and
    its API can run, revoke and terminate tasks. Called with Flower's own parsed options, so
    whatever the shape of the command line (``--basic-auth=``, ``--conf=``, ``celery --app``,
    FLOWER_* variables), it judges what Flower would actually do."""
    basic = [pair for pair in (getattr(options, "basic_auth", None) or [])
             if isinstance(pair, str) and pair.partition(":")[0] and pair.partition(":")[2]]
    oauth = getattr(options, "auth", None) and getattr(options, "auth_provider", None)
    if not (basic or oauth):
        raise SystemExit("wakeful: refusing to start Flower without authentication; use "
                         "`wakeful flower` with WAKEFUL_FLOWER_BASIC_AUTH=user:password")
    if env.get("FLOWER_UNAUTHENTICATED_API", "").strip().lower() not in ("", "0", "false", "no", "off"):
        raise SystemExit("wakeful: refusing FLOWER_UNAUTHENTICATED_API: it opens the API that "
                         "can run and revoke tasks")


def _guard_flower() -> None:
    """``celery -A tasks flower`` builds its app through ``flower.command.Flower`` after
    parsing its options; the celery command loads that module (a plugin) before it imports
    this one. Wrap it so the check above sees the options Flower parsed."""
    command = sys.modules.get("flower.command")
    if command is None or getattr(command.Flower, "wakeful_guarded", False):
        return

    class GuardedFlower(command.Flower):  # type: ignore[name-defined,misc]
        wakeful_guarded = True

        def __init__(self, options: object = None, **kwargs: object) -> None:
            refuse_open_flower(options, os.environ)
            super().__init__(options=options, **kwargs)

    command.Flower = GuardedFlower


_guard_flower()


class Runtime(Celery):
    """wakeful's Celery app. Its configuration, and the runtime settings it is made from, are
    loaded when Celery first asks for it (a worker, beat or flower at its start; a ring from
    the web edge or the CLI), never when a module is imported."""

    wakeful_settings: RuntimeSettings

    def on_configure(self) -> None:  # Celery calls it on the first read of app.conf
        if click.get_current_context(silent=True) is not None:
            # A command line (celery worker|beat|flower, wakeful ...): one line, exit 2.
            settings = for_process(RuntimeSettings, "wakeful")
        else:
            settings = RuntimeSettings.from_env()  # a library caller gets the SettingsError
        self.wakeful_settings = settings
        self.config_from_object(celery_config(settings))
        if settings.embedded_broker:
            embedded.configure(settings.embedded_poll_interval)
        elif settings.redis_broker:
            redis_guard.install()
            redis_clients.install()


# Every task's messages are checked before Celery builds a request from them, and the
# consumer records and drops what fails (tasks/guard.py: one bad message must never stop
# a worker).
app = Runtime("wakeful", task_cls="tasks.guard:GuardedTask")


def runtime_settings() -> RuntimeSettings:
    """This process's runtime settings: the ones its Celery app is configured with."""
    if not app.configured:
        app.conf.broker_url  # noqa: B018 - reading a key loads the configuration, and them with it
    return app.wakeful_settings


def _celery_role(argv: list[str]) -> str:
    """``beat``, or a worker's node name (``runs``, ``control`` from ``-n runs@%h``)."""
    if "beat" in argv:
        return "beat"
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-n", "--hostname"):
            return value.partition("@")[0] or "worker"
    return next((a.partition("=")[2].partition("@")[0] for a in argv if a.startswith("--hostname=")), "worker")


# Traces (docs/operating.md "Traces"): when an exporter is configured, every process that
# loads the app (workers, beat, and the web edge through the doorbell) carries the trace
# context in its task messages' headers; a prefork child inherits the instrumentation.
if telemetry.setup(_celery_role(sys.argv)):
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument()

@celeryd_init.connect
@beat_init.connect
def _at_start(**_kwargs) -> None:
    settings = runtime_settings()
    # Which store and broker, said once at the start (a typo'd or missing URL that leaves a
    # process on the embedded default is then plain to see; no password is shown).
    print(f"wakeful {_celery_role(sys.argv)}: {settings.where()}", file=sys.stderr, flush=True)
    closed_to_same_user()  # the database URL, the approval secret: no process of its user reads them
    # `wakeful up` and `wakeful demo` do this before starting anything; a process started
    # by hand (celery -A tasks worker) does it too, retrying if it races another. Only the
    # embedded SQLite store is migrated here: PostgreSQL is migrated once, by `wakeful init`
    # (compose's `init` service), never by every worker that starts.
    if settings.store_url.startswith("sqlite"):
        embedded.migrate_store(settings.store_url, settings.store_options())
    if settings.embedded_broker:
        embedded.init(app, QUEUES)
