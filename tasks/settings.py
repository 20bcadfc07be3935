"""Every runtime setting in one place, each default with the reason it has that value.

Read from ``WAKEFUL_*`` environment variables when this module is imported. Importing it has
no other effect: nothing is created, nothing connects. With nothing set, everything is
embedded under ``./var/``: a SQLite file for the store and kombu's SQLAlchemy transport on a
second SQLite file as the broker, so ``wakeful demo`` runs with only Python installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from store import StoreSettings
from store.db import embedded_url

AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")

class SettingsError(ValueError):
    """A setting that cannot work; the message names the variable (never a secret's value)."""


@dataclass(frozen=True)
class Settings:
    # Where the embedded defaults live. Relative to the working directory, like a Procfile app.
    home: Path = Path("var")
    # The store. Empty: a SQLite file under `home` (the embedded default). In production a
    # postgresql+psycopg:// URL: PostgreSQL decides what is true.
    database_url: str = field(default="", repr=False)  # may carry a password
    # "transaction" when database_url points at PgBouncer in transaction pooling mode: no
    # session state, timeouts SET LOCAL per transaction, no automatic prepared statements.
    database_pooler: str = ""
    # The doorbell broker. Empty: kombu's SQLAlchemy transport on SQLite under `home` (durable,
    # cross-process, FIFO). In production redis://:password@host:6379/0.
    broker_url: str = field(default="", repr=False)
    # Where task results go when a caller asks for one (send_task(..., ignore_result=False)).
    # Empty: the broker's Redis, or a SQLite file next to the embedded broker.
    result_backend: str = field(default="", repr=False)
    # Connections a dense (threads pool) worker's store keeps, and as many again of overflow;
    # 0: min(10, the worker's concurrency). A run holds one only inside a transaction (a few
    # ms of its seconds), so 10 carry ~1,000 runs in flight: 64 such workers through
    # PgBouncer still need no more server connections than PgBouncer's own pool.
    database_pool_size: int = 0
    # The agent: module:callable taking a Run and returning an Outcome.
    agent: str = "agent.demo:agent"
    # Outbox channel: "log", "jsonl:/path", an http(s):// URL (webhook), or module:callable.
    outbox_channel: str = field(default="log", repr=False)  # a URL may carry a token

    # --- the store's rules (passed to Store.connect): the defaults and their reasons are
    # the store's own, in store/settings.py; the runtime renews the lease between steps and
    # on run.heartbeat(), so lease_ttl only has to cover the longest stretch between two.
    lease_ttl: int = StoreSettings.lease_ttl
    max_attempts: int = StoreSettings.max_attempts
    outbox_gap: int = StoreSettings.outbox_gap
    batch_limit: int = StoreSettings.batch_limit
    backoff_base: int = StoreSettings.backoff_base
    backoff_max: int = StoreSettings.backoff_max
    outage_backoff_base: int = StoreSettings.outage_backoff_base
    outage_backoff_max: int = StoreSettings.outage_backoff_max
    outage_horizon: int = StoreSettings.outage_horizon
    dispatch_timeout: int = StoreSettings.dispatch_timeout

    # --- beat (seconds) ---
    # Timers fire at most this late; the scan is one indexed query for due rows.
    scan_interval: float = 5.0
    # How long a lost or late doorbell can delay an inbox (a Redis restart, a killed worker).
    sweep_interval: float = 30.0
    # How late a held (gap-delayed) message may go out; the first message after a quiet
    # period is dispatched right after the run that wrote it, not at this tick.
    dispatch_interval: float = 30.0
    # Retention runs rarely: it deletes old rows in bounded batches.
    purge_interval: float = 3600.0
    # Done events, sent messages and rejections older than this are purged (30 days).
    retention: int = 30 * 86400
    # The daily summary of new dead events and expired approvals goes to this inbox's outbox
    # (and on through the outbox channel); empty: to the log. A poison event must never just
    # look like an agent that went quiet.
    operator_inbox: str = ""
    # Hour of the day (UTC) of that summary: a time of day, not an interval, so a beat restart
    # never postpones it (beat keeps no schedule state). Morning, when someone reads it.
    summary_hour: int = 7

    # --- runs ---
    # Agent runs one task may do before it hands the inbox back and re-rings, so one busy
    # inbox cannot hold a worker forever.
    max_runs_per_task: int = 10
    # Seconds a draining run task keeps taking the next ready inbox straight from the
    # database once its own is idle (tasks/doorbell.py: coalesced rings and the sweep's rings
    # drain); past it the task rings again and ends, so no task holds a worker for good.
    # 0 turns draining off, and with it coalescing: one message per ring.
    drain_seconds: float = 30.0
    # Redis broker: a ring sends no message while a run task is queued that has not started
    # yet; this is the longest such a marker is trusted (tasks/doorbell.py). 0: every ring
    # sends a message.
    doorbell_coalesce_seconds: float = 5.0
    # Soft time limit of one run_inbox task (SoftTimeLimitExceeded fails the current run, with
    # backoff); the hard limit is 30 s later. Agent runs are meant to be short.
    run_time_limit: int = 600
    # Redis redelivers an unacked message after this long: above the hard time limit, so a
    # running task is never duplicated by the broker (kombu#337). Empty: 2 x the hard limit,
    # at least one hour.
    visibility_timeout: int = 0

    # --- broker health ---
    # Redis: probe idle connections before use so a dead socket is noticed (celery#9054).
    redis_health_check_interval: int = 25
    # Redis: a read that takes longer than this is a dead connection, not a slow one.
    redis_socket_timeout: int = 30
    # Embedded broker: seconds between polls of an empty queue. Measured here: 0.05 s gives a
    # wake-up (two hops: ingest, then the doorbell) of ~70-90 ms median, under 200 ms max, for
    # ~6 % of a core per idle worker polling three queues; 0.02 s halves the latency and
    # doubles the idle CPU.
    embedded_poll_interval: float = 0.05
    # Task events for Flower. On by default with Redis (Flower is in the Procfile); they cost
    # about a third of no-op throughput, so they can be turned off. Never on the embedded
    # broker, which has no fanout.
    task_events: bool = True

    # --- hostile input ---
    # Refused broker messages each worker records per second in the rejection table (a burst
    # of twice as many); beyond it they are dropped, logged and counted, never written: a
    # flood of garbage must not become a flood of writes to the database.
    rejections_per_second: float = 20.0
    # The approval links' keys ("new,old" while rotating; the web edge reads the same
    # variable): wakeful.answer_approval accepts an answer only with a token they signed.
    approval_secret: str = field(default="", repr=False)
    # Where the web edge answers approval links (the links the dispatcher mints), and how long
    # a link stays good: the web edge reads the same variables.
    public_url: str = "http://127.0.0.1:8000"
    approval_token_ttl: int = 7 * 86400
    # Fernet keys ("new,old" while rotating) that encrypt the per-inbox webhook secrets in
    # the database (`wakeful hooks`); read by the web process and the CLI, never stored.
    secrets_key: str = field(default="", repr=False)

    # --- Flower ---
    # "user:password[,user:password]". Flower refuses to start without it (`wakeful flower`).
    flower_basic_auth: str = field(default="", repr=False)
    # Loopback unless told otherwise: Flower's /metrics and /healthcheck stay open even with auth.
    flower_address: str = "127.0.0.1"
    flower_port: int = 5555

    # --- webhook channel ---
    # Seconds for one POST; the whole send (with retries) stays well inside dispatch_timeout.
    webhook_timeout: float = 10.0
    # Attempts per send, with exponential backoff between them (0.5 s, 1 s, 2 s ...).
    webhook_attempts: int = 4
    # Extra header for the webhook channel, "Name: value" (e.g. an Authorization token).
    webhook_header: str = field(default="", repr=False)

    # ------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = "WAKEFUL_" + f.name.upper()
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                continue
            values[f.name] = _parse(name, raw.strip(), f.default)
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        for name in ("lease_ttl", "max_attempts", "batch_limit", "backoff_base", "approval_token_ttl",
                     "backoff_max", "outage_backoff_base", "outage_backoff_max", "outage_horizon",
                     "dispatch_timeout", "max_runs_per_task", "run_time_limit",
                     "webhook_attempts", "retention"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"WAKEFUL_{name.upper()} must be positive")
        if self.outbox_gap < 0:
            raise SettingsError("WAKEFUL_OUTBOX_GAP must be 0 (no pacing: every message at once) or more seconds")
        for name in ("scan_interval", "sweep_interval", "dispatch_interval", "purge_interval",
                     "embedded_poll_interval", "webhook_timeout", "rejections_per_second"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"WAKEFUL_{name.upper()} must be positive")
        if self.database_pooler not in ("", "transaction"):
            raise SettingsError("WAKEFUL_DATABASE_POOLER must be empty or 'transaction' (PgBouncer's "
                                "transaction pooling)")
        if not 0 <= self.summary_hour <= 23:
            raise SettingsError("WAKEFUL_SUMMARY_HOUR must be an hour of the day, 0 to 23")
        if ":" not in self.agent and self.agent not in ("claude", "demo"):  # agent.BUILTIN
            raise SettingsError("WAKEFUL_AGENT must be module:callable (or claude, demo)")

    # --- derived values: the embedded defaults ---
    @property
    def store_url(self) -> str:
        return self.database_url or embedded_url(self.home)

    @property
    def broker(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.home / 'broker.sqlite3').resolve()}"

    @property
    def embedded_broker(self) -> bool:
        return self.broker.startswith(("sqla+sqlite", "sqlalchemy+sqlite"))

    @property
    def redis_broker(self) -> bool:
        """The broker is Redis: the doorbell coalesces rings there, and kombu's Redis QoS is
        guarded (tasks/redis_guard.py)."""
        return self.broker.startswith(("redis://", "rediss://", "redis+socket://"))

    @property
    def results(self) -> str:
        if self.result_backend:
            return self.result_backend
        if self.redis_broker:
            return self.broker
        if self.broker.startswith(AMQP_SCHEMES):
            # RabbitMQ: results travel back as messages to the caller that asked (Celery's
            # advice for AMQP). Nothing on a local disk, so it holds across machines; a
            # SQLite file under ./var made every process on RabbitMQ crash at its start.
            return "rpc://"
        return f"db+sqlite:///{(self.home / 'results.sqlite3').resolve()}"

    @property
    def hard_time_limit(self) -> int:
        return self.run_time_limit + 30

    @property
    def broker_visibility_timeout(self) -> int:
        return self.visibility_timeout or max(3600, 2 * self.hard_time_limit)

    def store_options(self) -> dict[str, Any]:
        """The keyword arguments for ``Store.connect``."""
        return {"pooler": self.database_pooler, **{name: getattr(self, name) for name in (
            "lease_ttl", "max_attempts", "outbox_gap", "batch_limit", "backoff_base",
            "backoff_max", "outage_backoff_base", "outage_backoff_max", "outage_horizon",
            "dispatch_timeout")}}


def _parse(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, Path):
            return Path(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a {type(default).__name__}") from None
    return raw


settings = Settings.from_env()
