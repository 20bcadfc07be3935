"""The schema: SQLAlchemy Core tables shared by PostgreSQL and SQLite.

Invariants live in named constraints so a database error can be traced to the rule it
protects. Partial indexes are declared for both dialects: the hot queries (claim, sweep,
scheduler, dispatch) only ever look at live rows, so their cost follows the live rows, not
the history. All times are integer seconds since the epoch (BIGINT), so a timer key such as
``digest@1700000000`` is exact.

Alembic migrations in ``store/migrations`` create exactly this; ``tests/store/test_migrations``
proves the two do not drift.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from .records import EffectStatus, EventStatus

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# JSON on SQLite, JSONB on PostgreSQL (refuses \u0000 and lone surrogates: the store
# checks for both before it writes, so the two engines refuse the same input).
Payload = JSON().with_variant(JSONB(), "postgresql")
Id = BigInteger().with_variant(Integer(), "sqlite")  # SQLite's rowid alias must be INTEGER

# Bounds on names, checked in Python (store/validate.py) and again by the column types.
INBOX_MAX = 128
SOURCE_MAX = 64
SOURCE_ID_MAX = 256

# One row per inbox: the lease (holder, generation, expiry) and the outbox's last send.
# Every per-inbox decision locks this row (SELECT ... FOR UPDATE on PostgreSQL).
inboxes = Table(
    "inboxes",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("holder", String(255)),
    Column("generation", BigInteger, nullable=False, server_default=text("0")),
    Column("lease_until", BigInteger, nullable=False, server_default=text("0")),
    Column("last_sent", BigInteger),
    # The newest event from the person the inbox talks to that a reply has answered
    # (store/outbox.py: a reply goes out inside the gap only while one is owed).
    Column("replied_through", BigInteger),
    # Monotonic counts for /metrics, kept on the row the counted decision already locks (a
    # global counters row would serialize takeovers on different inboxes).
    Column("takeovers", BigInteger, nullable=False, server_default=text("0")),
    Column("stale_finishes_refused", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("inbox"),
    CheckConstraint("generation >= 0", name="generation_not_negative"),
)

events = Table(
    "events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("source", String(SOURCE_MAX), nullable=False),
    Column("source_id", String(SOURCE_ID_MAX), nullable=False),
    Column("payload", Payload),  # NULL once purged; the key stays for the dedupe window
    Column("status", String(16), nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("claim_gen", BigInteger),  # the lease generation that claimed it last
    Column("not_before", BigInteger, nullable=False, server_default=text("0")),  # backoff
    # Runs that said "try later" for it (an outage: each gave its claim's attempt back, so
    # attempts + waits = claims), and when the current outage began (NULL: none).
    Column("waits", Integer, nullable=False, server_default=text("0")),
    Column("outage_since", BigInteger),
    Column("error", Text),
    Column("created", BigInteger, nullable=False),
    Column("claimed_at", BigInteger),
    Column("finished", BigInteger),
    # The one idea: a second delivery of the same key is refused by the database.
    UniqueConstraint("inbox", "source", "source_id", name="uq_events_key"),
    CheckConstraint(
        "status IN ('pending', 'running', 'done', 'dead')", name="status_known"
    ),
    CheckConstraint("attempts >= 0", name="attempts_not_negative"),
    # Claim and release look only at live rows of one inbox, oldest first.
    Index(
        "ix_events_live",
        "inbox",
        "id",
        postgresql_where=text("status IN ('pending', 'running')"),
        sqlite_where=text("status IN ('pending', 'running')"),
    ),
    # The whole backlog in arrival order: the next inbox a free worker takes (store/backlog.py).
    Index(
        "ix_events_pending",
        "id",
        postgresql_where=text("status = 'pending'"),
        sqlite_where=text("status = 'pending'"),
    ),
    Index(
        "ix_events_dead",
        "inbox",
        "id",
        postgresql_where=text("status = 'dead'"),
        sqlite_where=text("status = 'dead'"),
    ),
    # Purge walks finished rows by age.
    Index(
        "ix_events_finished",
        "finished",
        postgresql_where=text("finished IS NOT NULL"),
        sqlite_where=text("finished IS NOT NULL"),
    ),
)

STATUSES = tuple(EventStatus)


def status_is(*statuses: str, of: Any = events) -> ColumnElement[bool]:
    """``events.status`` (or an alias's, ``of``) tested against SQL literals, never bound
    parameters: a prepared statement's generic plan can then still prove the partial indexes
    usable (with a parameter it cannot, and the claim would read every event the inbox ever
    had)."""
    unknown = set(statuses) - set(STATUSES)
    assert not unknown, unknown  # only this module's constants are ever inlined
    literals = [literal_column(f"'{s}'") for s in statuses]
    return of.c.status == literals[0] if len(literals) == 1 else of.c.status.in_(literals)


timers = Table(
    "timers",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("timer_id", String(SOURCE_ID_MAX), nullable=False),
    Column("due", BigInteger, nullable=False),
    Column("every", BigInteger),
    Column("cron", String(255)),
    Column("tz", String(64)),
    Column("misfire", String(16), nullable=False, server_default=text("'coalesce'")),
    Column("payload", Payload, nullable=False),
    Column("key_source", String(SOURCE_MAX)),  # a fixed event key (one-off timers only)
    Column("key_source_id", String(SOURCE_ID_MAX)),
    Column("done", Boolean, nullable=False, server_default=text("false")),
    PrimaryKeyConstraint("inbox", "timer_id"),
    CheckConstraint("every IS NULL OR every > 0", name="every_positive"),
    CheckConstraint("every IS NULL OR cron IS NULL", name="every_or_cron"),
    CheckConstraint("misfire IN ('coalesce', 'each')", name="misfire_known"),
    # The scheduler reads only live timers by due time: its cost follows the due count.
    Index(
        "ix_timers_due",
        "due",
        postgresql_where=text("NOT done"),
        sqlite_where=text("done = 0"),  # SQLite matches partial-index terms literally
    ),
)

approvals = Table(
    "approvals",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("request_id", String(SOURCE_ID_MAX), nullable=False),
    Column("action", Text, nullable=False),
    Column("deadline", BigInteger, nullable=False),
    Column("created", BigInteger, nullable=False),
    # Who gets the link: NULL for the inbox's own user, else "inbox:NAME" or "channel:NAME".
    Column("approver", String(INBOX_MAX + 16)),
    PrimaryKeyConstraint("inbox", "request_id"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("body", Text, nullable=False),
    Column("urgent", Boolean, nullable=False, server_default=text("false")),
    # reply, notice or approval (store/outbox.py); an approval's fields (tool, input, words,
    # deadline ...) ride in ``fields``, so a channel need not parse them out of the body.
    Column("kind", String(16), nullable=False, server_default=text("'notice'")),
    Column("fields", Payload),
    # A named channel (an approver "channel:NAME") instead of the deployment's own.
    Column("channel", String(64)),
    Column("created", BigInteger, nullable=False),
    Column("dispatch_key", String(64)),  # set when a dispatcher claims the row
    Column("claimed_at", BigInteger),  # when that dispatcher claimed it
    Column("sent_at", BigInteger),
    CheckConstraint("kind IN ('reply', 'notice', 'approval')", name="kind_known"),
    Index(
        "ix_outbox_held",
        "inbox",
        "id",
        postgresql_where=text("sent_at IS NULL"),
        sqlite_where=text("sent_at IS NULL"),
    ),
)

memory = Table(
    "memory",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("key", String(255), nullable=False),
    Column("value", Payload, nullable=False),
    Column("updated", BigInteger, nullable=False),
    PrimaryKeyConstraint("inbox", "key"),
)

# The run log: one row per committed finish, written in the same fenced transaction.
runs = Table(
    "runs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("holder", String(255), nullable=False),
    Column("started", BigInteger, nullable=False),
    Column("finished", BigInteger, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("event_ids", JSON, nullable=False),
    Column("error", Text),
    Index("ix_runs_inbox", "inbox", "id"),
)

# Input that was refused, kept where an operator can see it (never the whole body, never a secret).
rejected = Table(
    "rejected",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("received", BigInteger, nullable=False),
    Column("origin", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    Column("inbox", String(INBOX_MAX)),
    Column("source", String(SOURCE_MAX)),
    Column("source_id", String(SOURCE_ID_MAX)),
    Column("excerpt", Text),
    Index("ix_rejected_received", "received"),
)

# Per-inbox webhook secrets, one row per (inbox, sender kind). ``secrets`` is a Fernet token
# (store/hook_secrets.py): a dump of the database alone does not reveal them.
HOOK_KINDS = ("github", "stripe", "standard")
hook_secrets = Table(
    "hook_secrets",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("secrets", Text, nullable=False),
    Column("updated", BigInteger, nullable=False),
    PrimaryKeyConstraint("inbox", "kind"),
    CheckConstraint("kind IN ('github', 'stripe', 'standard')", name="kind"),
)


# A tool call with an effect (wakeful/agent/effects.py), committed by the run's finish and executed
# after it. One row per (inbox, tool_use id): a tool use that was never committed has no row
# and never runs. ``status``: asked (waits for a human's yes) -> ready -> executing -> done;
# or refused / expired (the answer was no, or nobody answered: never runs); or interrupted
# (an at-most-once call whose executor died: not tried again).
EFFECT_STATUSES = tuple(EffectStatus)
effects = Table(
    "effects",
    metadata,
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("tool_use_id", String(SOURCE_ID_MAX), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("input", Payload, nullable=False),
    Column("words", Text),  # what the model said before the call (shown with an approval)
    Column("why", Text),  # why the runtime asks a human, when the policy alone would not
    Column("idempotency_key", String(128), nullable=False),
    Column("delivery", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("generation", BigInteger, nullable=False),  # the lease generation that committed it
    Column("result", Payload),  # {"content": str, "is_error": bool} once done
    Column("created", BigInteger, nullable=False),
    Column("updated", BigInteger, nullable=False),
    # A ready effect whose tool's upstream was down waits until then (store/retries.py), from
    # an outage that began at outage_since.
    Column("not_before", BigInteger, nullable=False, server_default=text("0")),
    Column("outage_since", BigInteger),
    PrimaryKeyConstraint("inbox", "tool_use_id"),
    CheckConstraint("status IN ('asked', 'ready', 'executing', 'done', 'refused', 'expired', "
                    "'interrupted')", name="status_known"),
    CheckConstraint("delivery IN ('at-least-once', 'at-most-once')", name="delivery_known"),
    CheckConstraint("attempts >= 0", name="attempts_not_negative"),
    # The executor's scan looks only at effects that may run.
    Index("ix_effects_runnable", "updated",
          postgresql_where=text("status IN ('ready', 'executing')"),
          sqlite_where=text("status IN ('ready', 'executing')")),
)


# Grants of the egress proxy (wakeful/proxy/, store/grants.py): a random token, stored only as its
# sha256, bound to an inbox and a lease generation; a run's grant lives while that generation
# holds the lease, an effect's while its effect executes (tool_use_id, attempt).
grants = Table(
    "grants",
    metadata,
    Column("token_hash", String(64), nullable=False),
    Column("inbox", String(INBOX_MAX), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("holder", String(255), nullable=False),  # who asked for it (shown, never checked)
    Column("routes", JSON, nullable=False),  # route names the grant covers
    Column("tool_use_id", String(SOURCE_ID_MAX)),  # set: an effect's grant
    Column("attempt", Integer),  # the effect's attempt it was minted for
    Column("created", BigInteger, nullable=False),
    Column("expires", BigInteger, nullable=False),
    PrimaryKeyConstraint("token_hash"),
    Index("ix_grants_inbox", "inbox", "expires"),  # minting clears the inbox's expired grants
)

# One row per request through the proxy: who (inbox, generation, tool use), where (route,
# method, path without its query), what came of it; never a header or a body.
audit = Table(
    "audit",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", BigInteger, nullable=False),
    Column("inbox", String(INBOX_MAX)),  # NULL: no grant, or one the store does not know
    Column("generation", BigInteger),
    Column("tool_use_id", String(SOURCE_ID_MAX)),
    Column("route", String(64), nullable=False),
    Column("method", String(16), nullable=False),
    Column("path", String(1024), nullable=False),
    Column("status", Integer, nullable=False),
    Column("bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("duration_ms", Integer, nullable=False, server_default=text("0")),
    Column("outcome", String(32), nullable=False),  # "ok" or why not (store/grants.py OUTCOMES)
    Index("ix_audit_inbox", "inbox", "id"),
    Index("ix_audit_at", "at"),  # retention
    # /metrics counts the requests that did not go well, by route and outcome.
    Index("ix_audit_not_ok", "route", "outcome",
          postgresql_where=text("outcome <> 'ok'"), sqlite_where=text("outcome <> 'ok'")),
)


# What the model cost, per UTC day (store/spend.py): one row per inbox per day, and an agent's
# day (all of its inboxes together) spread over ``shard`` rows (an inbox adds to one; inbox
# rows are shard 0) so that counts of many inboxes at once do not queue on one row lock.
# Counted right after each model call in a transaction of its own (not fenced: a call a
# fenced run made was paid for all the same). ``day`` is the
# day's first second (UTC, database clock); cost in billionths of the price table's currency.
# ``refused`` calls were not made (a ceiling was reached), the first at ``first_refused``;
# ``told`` is when the inbox's user was told (once a day, inbox rows only).
SPEND_SCOPES = ("inbox", "agent")
spend = Table(
    "spend",
    metadata,
    Column("scope", String(8), nullable=False),
    Column("name", String(INBOX_MAX), nullable=False),
    Column("day", BigInteger, nullable=False),
    Column("shard", SmallInteger, nullable=False, server_default=text("0")),
    Column("calls", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_nanos", BigInteger, nullable=False, server_default=text("0")),
    Column("token_ceiling", BigInteger),  # the ceilings in force at the last call (shown)
    Column("cost_ceiling_nanos", BigInteger),
    Column("refused", BigInteger, nullable=False, server_default=text("0")),
    Column("first_refused", BigInteger),
    Column("told", BigInteger),
    Column("updated", BigInteger, nullable=False),
    PrimaryKeyConstraint("scope", "name", "day", "shard"),
    CheckConstraint("scope IN ('inbox', 'agent')", name="scope_known"),
    Index("ix_spend_day", "day"),  # /metrics and the summary read one day, retention old days
)
