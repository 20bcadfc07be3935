"""The Celery configuration for a broker that is only a doorbell.

The database decides what is true; a Celery message only says "look at inbox X". So a lost,
duplicated or late message must cost nothing, and the settings below are chosen for that:
late acks and reject-on-worker-lost so a killed worker's message comes back, prefetch 1 so a
long agent run never sits on messages another worker could take, JSON only so nothing the broker
hands a worker can run code when decoded, results ignored unless a caller asks.
"""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from wakeful.settings import REDIS_SCHEMES, RuntimeSettings

# Queues. External callers send with no routing options, so the entry points live on
# Celery's default queue; agent runs have their own queue (and their own worker in the
# Procfile) so a long run never starves ingest, timers or dispatch.
DEFAULT_QUEUE = "celery"
RUNS_QUEUE = "wakeful.runs"
CONTROL_QUEUE = "wakeful.control"
OUTBOX_QUEUE = "wakeful.outbox"
QUEUES = (DEFAULT_QUEUE, RUNS_QUEUE, CONTROL_QUEUE, OUTBOX_QUEUE)

ROUTES = {
    "wakeful.ingest": {"queue": DEFAULT_QUEUE},
    "wakeful.answer_approval": {"queue": DEFAULT_QUEUE},
    "wakeful.run_inbox": {"queue": RUNS_QUEUE},
    "wakeful.scan_timers": {"queue": CONTROL_QUEUE},
    "wakeful.sweep": {"queue": CONTROL_QUEUE},
    "wakeful.purge": {"queue": CONTROL_QUEUE},
    "wakeful.execute_effects": {"queue": RUNS_QUEUE},  # tool calls wait as runs do: the dense worker
    "wakeful.dispatch_outbox": {"queue": OUTBOX_QUEUE},
}

# Beat's housekeeping, which Flower never lists (docs/operating.md "Flower"): a timer scan
# every 5 s buried an evening's runs within a minute. Every message of these is a tick, or
# (execute_effects) a ring whose result comes back as an event, so as a run; they send no
# task events. A batch task's tick (dispatch_outbox's) is kept quiet by tasks/batches.py.
HOUSEKEEPING = ("wakeful.scan_timers", "wakeful.sweep", "wakeful.purge", "wakeful.execute_effects")


def celery_config(s: RuntimeSettings) -> dict[str, Any]:
    from beat_schedule import beat_schedule

    config: dict[str, Any] = {
        "broker_url": s.broker,
        "result_backend": s.results,
        # JSON only: a worker trusts whatever the broker hands it.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # A task's message is acked when it ends, and given back if its process dies:
        # without reject_on_worker_lost a killed child acks (measured: the task was lost).
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # One message per process at a time: a long run never holds messages hostage.
        "worker_prefetch_multiplier": 1,
        # Results fill Redis when kept (celery#7801): only a caller that asks gets one.
        "task_ignore_result": True,
        "result_expires": 86400,
        "task_store_errors_even_if_ignored": False,
        # Each queue on a direct exchange of its own name: what a plain client that names
        # the queue (or sends with no options, to "celery") declares itself.
        "task_queues": [Queue(name, Exchange(name, type="direct"), routing_key=name)
                        for name in QUEUES],
        "task_default_queue": DEFAULT_QUEUE,
        "task_routes": ROUTES,
        # An agent run's time limits (SoftTimeLimitExceeded fails the current run, with backoff).
        "task_annotations": {"wakeful.run_inbox": {"soft_time_limit": s.run_time_limit,
                                                   "time_limit": s.hard_time_limit},
                             **{name: {"send_events": False} for name in HOUSEKEEPING}},
        # No "task-sent" (Celery's default): Flower lists a message once a worker takes it,
        # and every row it lists reaches an outcome. With it, each beat tick and each batch
        # task's message stayed PENDING forever (no worker event followed); what is waiting
        # is the store's to say (`wakeful status`).
        "task_send_sent_event": False,
        "task_create_missing_queues": True,
        # Records and drops invalid, unknown and undecodable messages instead of exiting
        # (tasks/guard.py; celery#7975).
        "worker_consumer": "tasks.guard:GuardedConsumer",
        "broker_connection_retry_on_startup": True,
        # A Redis blip must not kill a running agent run: that would cost the event an
        # attempt (three blips and it is dead). The run finishes through the database; its
        # unackable message comes back later, finds nothing to claim and ends.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_hijack_root_logger": True,
        "worker_redirect_stdouts": False,
        "timezone": "UTC",
        "enable_utc": True,
        "beat_schedule": beat_schedule(s),
        # Beat keeps nothing: its ticks are idempotent and the store holds every timer, so
        # the in-memory scheduler (no schedule file to create, lock or corrupt) is enough.
        "beat_scheduler": "celery.beat:Scheduler",
        # One result backend for all of a process's threads where it is safe to share (a
        # Redis client is: its connection pool is), not one per thread: every send_task builds
        # an AsyncResult, so each of a dense worker's 1,200 threads made a backend of its own
        # on its first ring (~5 ms of CPU each: redis-py reads its package metadata).
        "result_backend_thread_safe": s.results.startswith(REDIS_SCHEMES),
    }
    if s.embedded_broker:
        config.update(_embedded(s))
    else:
        config["worker_send_task_events"] = s.task_events
    if s.redis_broker:
        config.update(_redis(s))
    return config


def _redis(s: RuntimeSettings) -> dict[str, Any]:
    transport = {
        # Above the longest task: a message unacked for this long is delivered again.
        "visibility_timeout": s.broker_visibility_timeout,
        "socket_timeout": s.redis_socket_timeout,
        "socket_connect_timeout": 5,  # a doorbell must not hang a webhook response
        "socket_keepalive": True,
        "health_check_interval": s.redis_health_check_interval,
        "retry_on_timeout": True,
    }
    return {
        "broker_transport_options": transport,
        "result_backend_transport_options": {
            "socket_timeout": s.redis_socket_timeout,
            "socket_keepalive": True,
            "health_check_interval": s.redis_health_check_interval,
            "retry_on_timeout": True,
        },
        "redis_backend_health_check_interval": s.redis_health_check_interval,
        "redis_socket_keepalive": True,
    }


def _embedded(s: RuntimeSettings) -> dict[str, Any]:
    # The SQLAlchemy transport hands its options to create_engine (a polling_interval here
    # crashes it; that is set on the Transport class, see tasks/embedded.py). The busy
    # timeout lets the processes' polls queue on the SQLite write lock instead of failing.
    return {
        "broker_transport_options": {"connect_args": {"timeout": 15}},
        # No fanout on this transport: no remote control, gossip, mingle or task events.
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "database_engine_options": {"connect_args": {"timeout": 15}},
    }
