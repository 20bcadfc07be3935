"""Every setting of wakeful in one module, each default with the reason it has that value.

One class per process concern, all read from ``WAKEFUL_*`` environment variables:
``StoreSettings`` (the store's rules, also ``Store.connect(url, **rules)``), ``RuntimeSettings``
(the Celery shell: workers, beat, flower, the CLI; it carries the store's rules),
``WebSettings`` (the web edge) and ``ProxySettings`` (the egress proxy, ``WAKEFUL_PROXY_*``).
The web edge and the runtime share the approval and refusal settings (``_Shared``): one
variable, one parse, one type.

Nothing is read when this module is imported. Each process loads what it needs at its start
(``RuntimeSettings.from_env()``) and passes it down; a bare constructor reads no environment,
only the values it is given. A value that cannot work is a ``SettingsError`` whose one line
names the variable (or the keyword) and what it accepts, and never shows the value of a
setting that may hold a secret (one kept out of ``repr``).

This is a leaf at the bottom of the house: it imports nothing of ours but wakeful/errors.py.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import AliasChoices, BeforeValidator, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from wakeful import errors

PREFIX = "WAKEFUL_"
# WAKEFUL_AGENT's short names (agent.loading.BUILTIN); anything else is module:callable.
BUILTIN_AGENTS = ("claude", "demo")
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")
REDIS_SCHEMES = ("redis://", "rediss://", "redis+socket://")
EMBEDDED_BROKER_SCHEMES = ("sqla+sqlite", "sqlalchemy+sqlite")


class SettingsError(errors.WakefulError, ValueError):
    """A setting that cannot work: one line naming the variable (or keyword) and what it
    accepts; never the value of a secret."""


def _comma_separated(value: Any) -> Any:
    # "new,old": a key or secret is rotated by adding the new one in front, then removing the old.
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


# The kinds of value a setting takes; each says what it accepts, which is what an error says.
Positive = Annotated[int, Field(gt=0, description="a positive integer")]
NonNegative = Annotated[int, Field(ge=0, description="a whole number >= 0")]
Seconds = Annotated[float, Field(gt=0, description="positive (a number of seconds)")]
SecondsOrOff = Annotated[float, Field(ge=0, description="a number of seconds >= 0 (0: off)")]
PerSecond = Annotated[float, Field(gt=0, description="positive (a number per second)")]
Port = Annotated[int, Field(gt=0, lt=65536, description="a TCP port, 1 to 65535")]
Flag = Annotated[bool, Field(description="true or false (1/0, yes/no, on/off)")]
Keys = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_separated),
                 Field(description="a comma-separated list")]


def secret(default: Any = "", **kwargs: Any) -> Any:
    """A field that may hold a secret (a key, a password in a URL): never in a repr or an error."""
    return Field(default, repr=False, **kwargs)


def read_from(name: str, default: Any, **kwargs: Any) -> Any:
    """A field read from a variable whose name is not PREFIX + its own (kept from before)."""
    return Field(default, validation_alias=AliasChoices(name), **kwargs)


class _Settings(BaseSettings):
    """Frozen, typed, read from the environment by ``from_env`` only; every error a SettingsError."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="forbid", populate_by_name=True)

    # _from_env: the values came from the environment, so an error names the variable a
    # person set (WAKEFUL_LEASE_TTL), not the keyword a caller passed (lease_ttl).
    def __init__(self, _from_env: bool = False, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError("; ".join(_problem(type(self), e, _from_env) for e in exc.errors())) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, env_settings: Any,
                                   dotenv_settings: Any, file_secret_settings: Any) -> tuple[Any, ...]:
        # The given values only: the environment is read by from_env, explicitly.
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """The settings from ``env`` (default: this process's environment)."""
        source = EnvSettingsSource(cls)
        # A blank variable is an unset one (a compose file's `X=`); names match in any case.
        env = os.environ if env is None else env
        unknown_variable(env)
        source.env_vars = {name.lower(): value.strip() for name, value in env.items() if value.strip()}
        return cls(_from_env=True, **source())

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of the field ``name``."""
        alias = cls.model_fields[name].validation_alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        return str(cls.model_config.get("env_prefix", "")) + name.upper()


# WAKEFUL_* variables that are not a process's settings: the outbox's named channels
# (WAKEFUL_CHANNEL_<NAME>, read by channel_spec) and the test harness's own (fault points,
# the test services, the trace test directory, CI's "services required"), which the tests
# set in the processes they start.
NOT_SETTINGS_PREFIXES = (PREFIX + "CHANNEL_", PREFIX + "FAULTS", PREFIX + "TEST_")
NOT_SETTINGS = (PREFIX + "REQUIRE_SERVICES", PREFIX + "TRACES_TEST_DIR")


def without_password(url: str) -> str:
    """``url`` with the password of its authority (``user:password@``) shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}").geturl()


def unknown_variable(env: Mapping[str, str]) -> None:
    """A ``WAKEFUL_*`` variable no process reads is a mistake (a typo'd WAKEFUL_DATABSE_URL
    would leave the store on its embedded default): a SettingsError naming the closest one."""
    import difflib

    names = known_variables()
    for name in sorted(env):
        upper = name.upper()
        if (not upper.startswith(PREFIX) or upper in names or upper in NOT_SETTINGS
                or upper.startswith(NOT_SETTINGS_PREFIXES)):
            continue
        # Matched without the prefix every name shares, which would make anything look close.
        closest = difflib.get_close_matches(upper[len(PREFIX):], [n[len(PREFIX):] for n in names], n=1, cutoff=0.6)
        hint = f"; did you mean {PREFIX}{closest[0]}?" if closest else " (wakeful/settings.py lists them)"
        raise SettingsError(f"{name} is not a wakeful setting{hint}")


def known_variables() -> set[str]:
    """Every variable a settings class of any process reads."""
    names: set[str] = set()
    for cls in (RuntimeSettings, WebSettings, ProxySettings):
        for field, info in cls.model_fields.items():
            alias = info.validation_alias
            names.update(alias.choices if isinstance(alias, AliasChoices) else [cls.variable(field)])
    return {str(n).upper() for n in names}


S = TypeVar("S", bound=_Settings)


def for_process(cls: type[S], program: str) -> S:
    """``cls.from_env()`` for a process at its start (or a command): a bad setting ends it
    with one line on stderr and exit status 2, no traceback."""
    try:
        return cls.from_env()
    except SettingsError as exc:
        refuse(program, exc)


def refuse(program: str, reason: object) -> NoReturn:
    """End this process on a bad setting: one line on stderr, exit status 2."""
    print(f"{program}: {reason}", file=sys.stderr)
    raise SystemExit(2)


def _problem(cls: type[_Settings], error: Any, from_env: bool) -> str:
    """One error of pydantic's as one clause: the variable (or keyword), what it accepts, and
    what it got unless the field may hold a secret."""
    key = str(error["loc"][0]) if error["loc"] else ""
    name, info = _field(cls, key)
    if info is None:
        return f"{key}: unknown setting" if key else str(error.get("ctx", {}).get("error") or error["msg"])
    shown = cls.variable(name) if from_env else name
    if error["type"] == "value_error":
        reason = str(error["ctx"]["error"])  # a validator's own words: "must be ..."
    elif info.description:
        reason = f"must be {info.description}"
    else:
        reason = f"is not valid: {error['msg']}"
    got = f", got {error['input']!r}" if info.repr and "input" in error else ""
    return f"{shown} {reason}{got}"


def _field(cls: type[_Settings], key: str) -> tuple[str, FieldInfo | None]:
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        if key == name or (isinstance(alias, AliasChoices) and key in alias.choices):
            return name, info
    return key, None


class AgentFileSettings(_Settings):
    """Where the agent's TOML config is: read by the workers (the claude agent, the tool kit,
    the effect executor), the proxy (its ``[routes.*]``) and the CLI."""

    # WAKEFUL_AGENT_CONFIG. Empty: no config; the claude agent needs one, any other agent
    # then runs with no tools.
    agent_config: str = ""


def agent_config_path(env: Mapping[str, str] | None = None) -> str:
    """``WAKEFUL_AGENT_CONFIG`` from ``env`` (default: this process's environment), "" if unset."""
    return AgentFileSettings.from_env(env).agent_config


# Named outbox channels (an approver ``channel:NAME`` sends there): one variable per name, so
# open-ended and read by name rather than as fields. The value is a channel spec as
# WAKEFUL_OUTBOX_CHANNEL takes it.
CHANNEL_PREFIX = PREFIX + "CHANNEL_"


def channel_variable(name: str) -> str:
    """The environment variable that holds channel NAME's spec."""
    return f"{CHANNEL_PREFIX}{name.upper()}"


def channel_spec(name: str, env: Mapping[str, str] | None = None) -> str:
    """Channel NAME's spec from ``env`` (default: this process's environment), "" if unset."""
    return (os.environ if env is None else env).get(channel_variable(name), "").strip()


def read_toml(path: str | os.PathLike[str], error: type[ValueError] = SettingsError) -> dict[str, Any]:
    """The TOML file at ``path``. ``error`` (one line naming the file, and the line for bad
    TOML) when it cannot be read or parsed: the agent's config and the proxy's routes."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read the config ({exc.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line N, column M)"
        raise error(f"{path}: not valid TOML: {exc}") from None


def store_url(database_url: str, home: Path | str) -> str:
    """The store's URL: ``database_url``, or the embedded SQLite file under ``home``."""
    return database_url or f"sqlite:///{(Path(home) / 'wakeful.sqlite3').resolve()}"


class StoreSettings(_Settings):
    """The store's rules (``Store.connect(url, **rules)``): integers, in seconds where a time."""

    # Seconds a worker owns an inbox without renewing. Well above a normal run (renewed
    # between steps and on run.heartbeat()), or every long run turns into two.
    lease_ttl: Positive = 120
    # Claims before an event is parked dead: enough for a transient failure to pass, few
    # enough that a poison event stops hurting its inbox within minutes.
    max_attempts: Positive = 3
    # At most one outbox send per inbox per hour: start quiet (the article's number). A reply
    # owed to the person goes at once whatever the gap; 0 paces nothing.
    outbox_gap: NonNegative = 3600
    # Events per claim: one run should fit in one agent context.
    batch_limit: Positive = 100
    # Backoff after a failed run: base * 2**(attempts-1) seconds, capped. Long enough for a
    # rate limit or a flapping dependency to recover; short enough to finish within the hour.
    backoff_base: Positive = 10
    backoff_max: Positive = 600
    # A run that says "try later" (the model's or a tool's upstream is down: store/retries.py)
    # gives its attempt back and its events wait as long as the outage has lasted so far (at
    # least the base, at most the cap, jittered to between half and all of it): a blip is
    # answered within seconds, a long outage is tried about once per cap, and the cap bounds
    # how long an answer lags once the upstream is back.
    outage_backoff_base: Positive = 5
    outage_backoff_max: Positive = 300
    # Past this long of "try later" the events are parked dead with the reason "outage", so
    # nothing waits for ever (`wakeful requeue` brings them back). A day outlasts the model
    # API outages on record; a longer wait is an operator's call, not the runtime's.
    outage_horizon: Positive = 86400
    # Dedupe keys of finished events outlive their payloads by this much, so a sender's
    # late redelivery (Stripe retries for three days) is still refused.
    dedupe_window: Positive = 7 * 86400
    # Largest payload accepted, as UTF-8 JSON: webhooks recommend < 20 kB; 256 KiB leaves
    # room for a chat message with context, and keeps one event well inside a jsonb page chain.
    max_payload_bytes: Positive = 256 * 1024
    # misfire="each" emits at most this many missed occurrences per fire, so a 1-second
    # timer after a week's outage cannot flood its inbox; the rest are counted in `skipped`.
    misfire_each_cap: Positive = 100
    # A dispatcher that claimed outbox rows and vanished: after this long another may
    # resend them (with the same key). Longer than any channel's send with its retries.
    dispatch_timeout: Positive = 300
    # Seconds a PostgreSQL statement waits for a row lock. Store transactions last
    # milliseconds; a longer wait means a paused process holds the inbox, and a worker should
    # move on (acquire says "held"; the sweep rings again) instead of stalling behind it.
    lock_timeout: Positive = 5
    # Timers fired per scheduler transaction: short transactions, bounded lock sets.
    scheduler_batch: Positive = 500

    @classmethod
    def names(cls) -> set[str]:
        return set(StoreSettings.model_fields)


class _Shared(_Settings):
    """What the web edge and the runtime both read: approval links are minted by the
    dispatcher and answered at the edge; both record refusals."""

    # Keys for approval tokens ("new,old" while rotating). The first signs new links; any of
    # them verifies, so a key can be rotated without breaking links already sent. None set:
    # approvals are refused, and a link is replaced by the command that answers it.
    approval_secrets: Keys = secret((), validation_alias=AliasChoices("WAKEFUL_APPROVAL_SECRET"))
    # Lifetime of an approval link when the caller does not say. The store decides the
    # approval's own deadline ("expired" after it); the token only bounds who may answer.
    approval_token_ttl: Positive = 7 * 86400
    # Where the web edge answers approval links (the public URL of the web process).
    public_url: str = "http://127.0.0.1:8000"
    # Fernet keys ("new,old" while rotating) that encrypt the per-inbox webhook secrets in
    # the database (`wakeful hooks`); read by the web process and the CLI, never stored.
    secrets_key: str = secret()
    # Refusals written to the store's rejection table per second by each process (a burst of
    # twice as many: store/budget.py). A flood of garbage must not become a flood of writes
    # to the database that decides what is true; beyond it refusals are still answered,
    # logged and counted, never written.
    rejections_per_second: PerSecond = 20.0


class RuntimeSettings(StoreSettings, _Shared, AgentFileSettings):
    """The Celery shell's settings (workers, beat, flower, the CLI). With nothing set,
    everything is embedded under ``./var/``: a SQLite file for the store and kombu's SQLAlchemy
    transport on a second SQLite file as the broker, so ``wakeful demo`` runs with only Python."""

    # Where the embedded defaults live. Relative to the working directory, like a Procfile app.
    home: Path = Path("var")
    # The store. Empty: a SQLite file under `home` (the embedded default). In production a
    # postgresql+psycopg:// URL: PostgreSQL decides what is true.
    database_url: str = secret()  # may carry a password
    # "transaction" when database_url points at PgBouncer in transaction pooling mode: no
    # session state, timeouts SET LOCAL per transaction, no automatic prepared statements.
    database_pooler: Annotated[Literal["", "transaction"],
                               Field(description="empty or 'transaction' (PgBouncer's transaction pooling)")] = ""
    # The doorbell broker. Empty: kombu's SQLAlchemy transport on SQLite under `home` (durable,
    # cross-process, FIFO). In production redis://:password@host:6379/0.
    broker_url: str = secret()
    # Where task results go when a caller asks for one (send_task(..., ignore_result=False)).
    # Empty: the broker's Redis, rpc:// on RabbitMQ, or a SQLite file next to the embedded broker.
    result_backend: str = secret()
    # Connections a dense (threads pool) worker's store keeps open (no overflow: see
    # tasks/runtime.py); 0: min(20, the worker's concurrency). A run holds one only inside a
    # transaction (a few ms of its seconds), so 20 carry ~1,000 runs in flight: 64 such
    # workers through PgBouncer still need no more server connections than PgBouncer's own pool.
    database_pool_size: NonNegative = 0
    # The agent: module:callable taking a Run and returning an Outcome (or claude, demo).
    agent: str = "wakeful.agent.demo:agent"
    # Outbox channel: "log", "jsonl:/path", an http(s):// URL (webhook), or module:callable.
    outbox_channel: str = secret("log")  # a URL may carry a token

    # --- beat (seconds) ---
    # Timers fire at most this late; the scan is one indexed query for due rows.
    scan_interval: Seconds = 5.0
    # How long a lost or late doorbell can delay an inbox (a Redis restart, a killed worker).
    sweep_interval: Seconds = 30.0
    # How late a held (gap-delayed) message may go out; the first message after a quiet
    # period is dispatched right after the run that wrote it, not at this tick.
    dispatch_interval: Seconds = 30.0
    # Retention runs rarely: it deletes old rows in bounded batches.
    purge_interval: Seconds = 3600.0
    # Done events, sent messages and rejections older than this are purged (30 days).
    retention: Positive = 30 * 86400
    # The daily summary of new dead events and expired approvals goes to this inbox's outbox
    # (and on through the outbox channel); empty: to the log. A poison event must never just
    # look like an agent that went quiet.
    operator_inbox: str = ""
    # Hour of the day (UTC) of that summary: a time of day, not an interval, so a beat restart
    # never postpones it (beat keeps no schedule state). Morning, when someone reads it.
    summary_hour: Annotated[int, Field(ge=0, le=23, description="an hour of the day, 0 to 23")] = 7

    # --- runs ---
    # Agent runs one task may do before it hands the inbox back and re-rings, so one busy
    # inbox cannot hold a worker forever.
    max_runs_per_task: Positive = 10
    # Seconds a draining run task keeps taking the next ready inbox straight from the
    # database once its own is idle (tasks/doorbell.py: coalesced rings and the sweep's rings
    # drain); past it the task rings again and ends, so no task holds a worker for good.
    # 0 turns draining off, and with it coalescing: one message per ring.
    drain_seconds: SecondsOrOff = 30.0
    # Redis broker: a ring sends no message while a run task is queued that has not started
    # yet; this is the longest such a marker is trusted (tasks/doorbell.py). 0: every ring
    # sends a message.
    doorbell_coalesce_seconds: SecondsOrOff = 5.0
    # Soft time limit of one run_inbox task (SoftTimeLimitExceeded fails the current run, with
    # backoff); the hard limit is 30 s later. Agent runs are meant to be short.
    run_time_limit: Positive = 600
    # Redis redelivers an unacked message after this long: above the hard time limit, so a
    # running task is never duplicated by the broker (kombu#337). 0: 2 x the hard limit, at
    # least one hour.
    visibility_timeout: NonNegative = 0

    # --- broker health ---
    # Redis: probe idle connections before use so a dead socket is noticed (celery#9054).
    redis_health_check_interval: NonNegative = 25
    # Redis: a read that takes longer than this is a dead connection, not a slow one.
    redis_socket_timeout: Positive = 30
    # Embedded broker: seconds between polls of an empty queue. 0.05 s gives a wake-up of
    # ~70-90 ms median for ~6 % of a core per idle worker (measured: docs/performance.md).
    embedded_poll_interval: Seconds = 0.05
    # Task events for Flower. On by default with Redis (Flower is in the Procfile); they cost
    # about a third of no-op throughput, so they can be turned off. Never on the embedded
    # broker, which has no fanout.
    task_events: Flag = True

    # --- Flower ---
    # "user:password[,user:password]". Flower refuses to start without it (`wakeful flower`).
    flower_basic_auth: str = secret()
    # Loopback unless told otherwise: Flower's /metrics and /healthcheck stay open even with auth.
    flower_address: str = "127.0.0.1"
    flower_port: Port = 5555

    # --- webhook channel ---
    # Seconds for one POST; the whole send (with retries) stays well inside dispatch_timeout.
    webhook_timeout: Seconds = 10.0
    # Attempts per send, with exponential backoff between them (0.5 s, 1 s, 2 s ...).
    webhook_attempts: Positive = 4
    # Extra header for the webhook channel, "Name: value" (e.g. an Authorization token).
    webhook_header: str = secret()

    @field_validator("agent")
    @classmethod
    def _agent_spec(cls, value: str) -> str:
        if ":" not in value and value not in BUILTIN_AGENTS:
            raise ValueError(f"must be module:callable (or {', '.join(BUILTIN_AGENTS)})")
        return value

    # --- derived values: the embedded defaults ---
    @property
    def store_url(self) -> str:
        return store_url(self.database_url, self.home)

    @property
    def broker(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.home / 'broker.sqlite3').resolve()}"

    @property
    def embedded_broker(self) -> bool:
        return self.broker.startswith(EMBEDDED_BROKER_SCHEMES)

    @property
    def redis_broker(self) -> bool:
        """The broker is Redis: the doorbell coalesces rings there, and kombu's Redis QoS is
        guarded (tasks/redis_guard.py)."""
        return self.broker.startswith(REDIS_SCHEMES)

    @property
    def redis_url(self) -> str | None:
        """The broker's Redis as redis-py takes it (kombu's redis+socket:// is its unix://);
        None when the broker is not Redis."""
        if not self.redis_broker:
            return None
        socket = "redis+socket://"
        return "unix://" + self.broker[len(socket):] if self.broker.startswith(socket) else self.broker

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

    def where(self) -> str:
        """Which store and broker this process uses, for the line a process says at its start
        (never a password): a store left on its embedded default is then plain to see."""
        store = self.store_url if self.database_url else f"{self.store_url} (embedded: WAKEFUL_DATABASE_URL is not set)"
        broker = self.broker if self.broker_url else f"{self.broker} (embedded: WAKEFUL_BROKER_URL is not set)"
        return f"store {without_password(store)}, broker {without_password(broker)}"

    def store_options(self) -> dict[str, Any]:
        """The keyword arguments for ``Store.connect``: the pooler and the store's rules."""
        return {"pooler": self.database_pooler, **{name: getattr(self, name) for name in StoreSettings.names()}}


class WebSettings(_Shared):
    """The web edge's settings. Secret values never appear in an error, a log line or a repr."""

    # One list per sender kind (comma-separated in the environment). A kind with no secret
    # is refused with 403: a receiver is never open to unsigned input.
    github_secrets: Keys = secret(())
    stripe_secrets: Keys = secret(())
    # Standard Webhooks secrets, ``whsec_`` + base64 (the prefix is optional, as in the spec).
    webhook_secrets: Keys = secret(())
    # Largest request body read, in bytes. The store keeps payloads up to 256 KiB as compact
    # JSON; 1 MiB leaves room for pretty-printed senders while bounding the memory one
    # request can take. Refused with 413 from Content-Length, before the body is read.
    max_body_bytes: Positive = read_from("WAKEFUL_WEB_MAX_BODY", 1024 * 1024)
    # Approval answers are a word and a token: anything bigger is not an answer.
    max_approval_body_bytes: Positive = 4096
    # Seconds a Stripe or Standard Webhooks timestamp may differ from our clock, in BOTH
    # directions: 300 s is both standards' number; the future bound stops a captured request
    # signed with a skewed or forged-ahead clock from being replayable for longer.
    tolerance: Positive = read_from("WAKEFUL_WEB_TOLERANCE", 300)
    # JSON nesting refused above this depth (422). Real webhook payloads are under 10 deep;
    # the store caps stored payloads at 64 and the edge wraps the body one level down.
    max_depth: Positive = 32
    # Digits allowed in one JSON integer (422 beyond). 64 covers every id and amount a sender
    # uses; Python refuses > 4,300 with a ValueError that must not become a 500.
    max_int_digits: Positive = 64
    # Seconds a receiver waits for the doorbell before answering anyway. The event is stored
    # and the sweep re-rings, so a broker outage must not make senders (GitHub gives up at
    # 10 s) time out and retry: a ring normally takes about a millisecond.
    ring_timeout: Seconds = 1.0
    # Rings running at once; beyond this a ring is skipped (the sweep covers it), so a broker
    # outage cannot pile up blocked threads.
    rings_in_flight: Positive = 8
    # Seconds /healthz waits for each of the store and the broker before calling it down.
    health_timeout: Positive = read_from("WAKEFUL_WEB_HEALTH_TIMEOUT", 3)
    # Where `python -m wakeful.web` listens. Loopback unless told otherwise: put a TLS-terminating
    # proxy in front; these receivers carry credentials (approval tokens) and must not be plain
    # HTTP on a public interface. PORT (a platform's convention) is honoured too.
    host: str = read_from("WAKEFUL_WEB_HOST", "127.0.0.1")
    port: Port = Field(8000, validation_alias=AliasChoices("WAKEFUL_WEB_PORT", "PORT"))
    # Seconds a client has to send a request's headers (wakeful/serving.py): senders and browsers send
    # them at once, and a buffering reverse proxy in front (recommended) sends them whole; a
    # half-sent request no longer holds a connection for ever. nginx waits 60 s, Apache's
    # mod_reqtimeout 20 s; 10 s is ample for a real client on any link.
    header_timeout: Positive = read_from("WAKEFUL_WEB_HEADER_TIMEOUT", 10)
    # Seconds a client has to send a whole request, headers and body, from its first byte
    # (wakeful/serving.py): then 408 and the connection is closed, so a body dribbled after
    # complete headers no longer holds a connection for as long as the client likes. The
    # largest body (WAKEFUL_WEB_MAX_BODY, 1 MiB) needs 100 KiB/s to arrive in 10 s; senders
    # send from data centres, and an approval answer is a few hundred bytes.
    request_timeout: Positive = read_from("WAKEFUL_WEB_REQUEST_TIMEOUT", 10)
    # The operator's console at /console (docs/console.md): its users, "name:hash"
    # comma-separated, each hash made by `python -m wakeful.web.console hash NAME` (scrypt: the
    # environment never holds a password). None: the console is off (404), because it shows
    # every inbox's events and answers approvals: it needs a login, as Flower does.
    console_users: Keys = secret(())
    # A link from each run in the console to its trace: a URL in which {inbox} and
    # {generation} stand for the run span's wakeful.inbox and wakeful.generation (a search
    # in Jaeger, Tempo ...). Empty: no link (traces are off unless an exporter is set).
    console_trace_url: str = ""

    @field_validator("webhook_secrets")
    @classmethod
    def _whsec(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from standardwebhooks.webhooks import Webhook

        for key in value:
            try:
                Webhook(key)
            except Exception:  # noqa: BLE001 - the library raises several types; name the variable only
                raise ValueError("holds a value that is not a whsec_ base64 secret") from None
        return value

    @property
    def listen(self) -> tuple[str, int]:
        return self.host, self.port


class ProxySettings(_Settings):
    """The egress proxy's settings (``WAKEFUL_PROXY_*``)."""

    model_config = SettingsConfigDict(env_prefix=PREFIX + "PROXY_")

    # Where workers reach the proxy, and so where it listens. Loopback: only processes on this
    # host reach it (compose puts it on the workers' network).
    url: str = "http://127.0.0.1:8780"
    # Largest response body passed back (bytes, after decompression): the rest is cut and the
    # request recorded as "response_cut". A Messages API answer is well under 1 MiB (a
    # 64k-token stream is a few MiB of SSE); a tool result is capped far lower by the agent.
    max_response_bytes: Positive = 16 * 1024 * 1024
    # Largest request body accepted (413 beyond): the Messages API's own request limit.
    max_request_bytes: Positive = 32 * 1024 * 1024
    # Seconds to connect to an upstream (502 when it cannot be reached at all).
    connect_timeout: Seconds = 10.0
    # Seconds of silence from an upstream before the request is given up (504 before the
    # response starts, cut after). A streamed answer sends pings well inside this; a long
    # non-streamed one sends nothing until done, so this is the slowest answer accepted.
    read_timeout: Seconds = 300.0
    # Connections to the upstreams open at once: every run in flight of the dense workers it
    # serves may be waiting on the model (httpx's default, 100, made the 101st caller wait for
    # a connection and get 504: measured, 1,100 of 1,200 calls at once). A caller beyond it
    # waits for a connection up to the read timeout, then gets 504.
    upstream_connections: Positive = 1000
    # Seconds a caller has to send a request's headers, from connecting (or from the end of
    # the previous answer on a kept-alive connection): then the connection is closed
    # (wakeful/serving.py). Workers send their headers in one write, so 10 s is already generous; a
    # slow or stalled client no longer holds a connection and a file descriptor for ever.
    header_timeout: Seconds = 10.0
    # Seconds a caller has to send a whole request, headers and body, from its first byte: then
    # 408 and the connection is closed (wakeful/serving.py); nothing half-sent goes upstream. The
    # largest body (max_request_bytes, 32 MiB) takes a few seconds even on a 100 Mbit/s link
    # between hosts; 30 s leaves room for that and still bounds a caller dribbling its body.
    request_timeout: Seconds = 30.0
    # Refusals of callers without a live grant for the route (no grant, forged, expired,
    # fenced, unknown route...) written to the audit a second, twice as many at once
    # (store/budget.py): anyone who reaches the proxy can cause them at will, and a flood of
    # them must not become a flood of writes. Beyond it they are answered, logged and counted
    # (``refusals_unrecorded`` in /healthz). A caller with a live grant is always recorded.
    refusals_per_second: PerSecond = 20.0
    # Processes serving the one address (uvicorn's workers: the parent binds it and restarts
    # a child that dies). One process is about one core at ~5 ms of CPU a call (the interpreter
    # lock), 100-200 calls a second; 1 because that carries a small host's workers and leaves
    # the other cores to them. Raise it to the cores the proxy may use. Each process opens its
    # own store pool, 4 database connections and 4 more at a peak (N x 4 to N x 8 in all; the
    # parent opens none), and keeps its own refusal budget (N x refusals_per_second).
    processes: Positive = 1

    @field_validator("url")
    @classmethod
    def _plain_http(cls, value: str) -> str:
        parts = urlsplit(value)
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            parts = urlsplit("")
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError("must be http://host:port (the proxy speaks plain HTTP to workers on a "
                             "private network or loopback)")
        return value.rstrip("/")

    @property
    def listen(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 80
