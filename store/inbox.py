"""The inbox: every wake-up is an event keyed (inbox, source, source_id), stored once.

Also the operator's side of the inbox: dead events, requeue, retention, and the record of
input that was refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Insert, bindparam, delete, func, select, update

from . import leases, rules, validate
from .db import NOW, clock_expr, insert
from .dialects import Dialect, for_, per_dialect
from .records import Event, InvalidEvent, Rejection
from .tables import events, rejected, status_is
from .transactions import Transactions

EVENT_COLUMNS = (
    events.c.id,
    events.c.inbox,
    events.c.source,
    events.c.source_id,
    events.c.payload,
    events.c.status,
    events.c.attempts,
    events.c.error,
    events.c.created,
    events.c.claim_gen,
    events.c.finished,
)


def to_event(row: Any) -> Event:
    return Event(*(row._mapping[c.name] for c in EVENT_COLUMNS))


def _insert_event(dialect: Dialect) -> Insert:
    return (
        dialect.insert(events)
        .values(inbox=bindparam("p_inbox"), source=bindparam("p_source"), source_id=bindparam("p_source_id"),
                payload=bindparam("p_payload", type_=events.c.payload.type), created=NOW)
        .on_conflict_do_nothing(index_elements=["inbox", "source", "source_id"])
        .returning(events.c.id)
    )


INSERT_EVENT = per_dialect(_insert_event)


def insert_event(conn: Connection, inbox: str, source: str, source_id: str, payload: dict[str, Any],
                 now: int | None) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING: True if stored, False for a duplicate key."""
    stored = conn.execute(for_(INSERT_EVENT, conn), {
        "p_inbox": inbox, "p_source": source, "p_source_id": source_id, "p_payload": payload, "p_now": now,
    }).scalar()
    return stored is not None


# Rows per INSERT statement in ``insert_events``: four parameters a row stays far below both
# engines' limits on parameters per statement (PostgreSQL 65,535; SQLite 32,766).
INSERT_CHUNK = 1000


def insert_events(conn: Connection, items: list[tuple[str, str, str, dict[str, Any]]], now: int | None) -> list[bool]:
    """Multi-row INSERT ... ON CONFLICT DO NOTHING, ``INSERT_CHUNK`` rows a statement, all in
    the caller's transaction; True per item that was stored.

    The same key twice in one batch is stored once (the first copy)."""
    created = clock_expr(now)
    new: set[tuple[str, str, str]] = set()
    for start in range(0, len(items), INSERT_CHUNK):
        stored = conn.execute(
            insert(conn, events)
            .values([{"inbox": i, "source": s, "source_id": sid, "payload": p, "created": created}
                     for i, s, sid, p in items[start:start + INSERT_CHUNK]])
            .on_conflict_do_nothing(index_elements=["inbox", "source", "source_id"])
            .returning(events.c.inbox, events.c.source, events.c.source_id)
        ).all()
        new.update(tuple(r) for r in stored)
    result = []
    for i, s, sid, _ in items:
        result.append((i, s, sid) in new)
        new.discard((i, s, sid))  # a second copy in the same batch is a duplicate
    return result


def event(conn: Connection, event_id: int) -> Event | None:
    row = conn.execute(select(*EVENT_COLUMNS).where(events.c.id == event_id)).one_or_none()
    return to_event(row) if row is not None else None


def events_of(conn: Connection, inbox: str, status: str | None = None) -> list[Event]:
    query = select(*EVENT_COLUMNS).where(events.c.inbox == inbox)
    if status is not None:
        query = query.where(events.c.status == status)
    return [to_event(r) for r in conn.execute(query.order_by(events.c.id))]


def dead(conn: Connection, inbox: str | None) -> list[Event]:
    query = select(*EVENT_COLUMNS).where(status_is("dead"))
    if inbox is not None:
        query = query.where(events.c.inbox == inbox)
    return [to_event(r) for r in conn.execute(query.order_by(events.c.id))]


REVIVED = {"status": "pending", "attempts": 0, "waits": 0, "outage_since": None, "error": None, "not_before": 0,
           "finished": None, "claim_gen": None}


def requeue(conn: Connection, inbox: str | None, event_id: int | None) -> list[Event]:
    """Dead events back to pending with their attempts reset: the one with ``event_id``, or
    every dead event of ``inbox``. Returns the events requeued."""
    if event_id is not None:
        inbox = conn.execute(select(events.c.inbox).where(events.c.id == event_id)).scalar()
        if inbox is None:
            return []
    leases.lock(conn, inbox)  # serialize with claims of that inbox
    query = update(events).where(events.c.inbox == inbox, status_is("dead"))
    if event_id is not None:
        query = query.where(events.c.id == event_id)
    rows = conn.execute(query.values(**REVIVED).returning(*EVENT_COLUMNS)).all()
    return sorted((to_event(r) for r in rows), key=lambda e: e.id)


# Rows the rejection table keeps at most: weeks of ordinary refusals, a few MB at most.
REJECTIONS_KEPT = 10_000


def record_rejection(conn: Connection, origin: str, reason: str, inbox: Any, source: Any, source_id: Any,
                     excerpt: Any, now: int | None) -> None:
    def bounded(value: Any, limit: int) -> str | None:
        return None if value is None else validate.excerpt(value if isinstance(value, (str, bytes)) else repr(value), limit)

    newest = conn.execute(
        rejected.insert().returning(rejected.c.id).values(
            received=clock_expr(now),
            origin=bounded(origin, 64) or "unknown",
            reason=bounded(reason, 2000) or "invalid",
            inbox=bounded(inbox, 128),
            source=bounded(source, 64),
            source_id=bounded(source_id, 256),
            excerpt=None if excerpt is None else validate.excerpt(excerpt),
        )
    ).scalar_one()
    # A flood must not grow the table without bound, whatever the rate limits in front of
    # it let through: the oldest rows beyond the cap go (one indexed range delete, usually
    # of nothing). Retention (purge) still removes rows by age.
    conn.execute(delete(rejected).where(rejected.c.id <= newest - REJECTIONS_KEPT))


def rejections(conn: Connection, limit: int) -> list[Rejection]:
    rows = conn.execute(select(rejected).order_by(rejected.c.id.desc()).limit(limit))
    return [Rejection(**r._mapping) for r in rows]


def sweep_candidates(conn: Connection, now: int, limit: int) -> list[str]:
    """Inboxes with work and no live lease: pending events past their backoff, or events
    left running by a worker whose lease lapsed. These are the inboxes whose doorbell was
    lost, duplicated away or never rung."""
    query = (
        select(events.c.inbox)
        .where(rules.unattended(events, now), ~rules.leased(events, now))
        .group_by(events.c.inbox)
        .order_by(func.min(events.c.id))
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


class Intake:
    """What comes in besides one ``ingest`` (``store.intake``): a batch of events."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def ingest_many(self, items: Iterable[tuple[str, str, str, dict[str, Any]]], *,
                    now: int | None = None) -> list[bool]:
        """Many ``(inbox, source, source_id, payload)`` in one short transaction; True per
        item stored. Every item is checked first: one bad item raises ``InvalidEvent``
        (naming its index) and nothing is stored."""
        batch = list(items)
        limit = self.transactions.settings.max_payload_bytes
        for n, item in enumerate(batch):
            try:
                inbox, source, source_id, payload = item
                validate.inbox(inbox)
                validate.outside_key(source, source_id)
                validate.payload(payload, limit)
            except (TypeError, ValueError) as exc:
                raise InvalidEvent(f"item {n}: {exc}") from None
        with self.transactions.transaction() as conn:
            return insert_events(conn, batch, now)
