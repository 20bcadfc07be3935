"""The outbox: messages written with a run's completion, sent at most once per gap, merged.

A dispatch never holds a transaction across the send:

* at-least-once (the default): claim the held rows under a dispatch key and commit; send;
  mark them sent and commit. A crash between the two leaves the rows claimed; once the claim
  is older than ``dispatch_timeout`` the next dispatch resends them with the **same key**, so
  a channel that passes the key on (``Idempotency-Key``) lets the receiver drop the copy.
* at-most-once: mark the rows sent when claiming them, then send. A crash loses the message
  instead of repeating it.

An urgent message opens the gap at once and carries everything held with it, urgent bodies
first; it counts as the last send. Two dispatchers serialize on the inbox row: the second
finds the rows claimed and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, and_, or_, select, update

from . import leases
from .db import clock, transaction
from .records import AT_LEAST_ONCE, AT_MOST_ONCE, OutboxRow, OutgoingMessage
from .settings import StoreSettings
from .tables import inboxes, outbox

HELD = outbox.c.sent_at.is_(None)


def dispatch(engine: Engine, s: StoreSettings, inbox: str, send: Callable[[OutgoingMessage], Any],
             now: int | None) -> int:
    delivery = getattr(send, "delivery", AT_LEAST_ONCE)
    if delivery not in (AT_LEAST_ONCE, AT_MOST_ONCE):
        raise ValueError(f"delivery must be {AT_LEAST_ONCE!r} or {AT_MOST_ONCE!r}, got {delivery!r}")
    with transaction(engine) as conn:
        message = _claim(conn, s, inbox, delivery, now)
    if message is None:
        return 0
    try:
        send(message)
    except BaseException:
        if delivery == AT_LEAST_ONCE:
            with transaction(engine) as conn:  # let the next dispatch retry now, same key
                conn.execute(update(outbox).where(outbox.c.dispatch_key == message.key, HELD)
                             .values(claimed_at=None))
        raise
    if delivery == AT_LEAST_ONCE:
        with transaction(engine) as conn:
            _mark_sent(conn, inbox, message.key, clock(conn, now))
    return len(message.message_ids)


def _claim(conn: Connection, s: StoreSettings, inbox: str, delivery: str, now: int | None) -> OutgoingMessage | None:
    lease = leases.lock(conn, inbox, now)
    now = int(lease.now) if lease is not None else clock(conn, now)
    held = conn.execute(
        select(outbox.c.id, outbox.c.body, outbox.c.urgent, outbox.c.dispatch_key, outbox.c.claimed_at)
        .where(outbox.c.inbox == inbox, HELD)
        .order_by(outbox.c.id)
    ).all()
    if not held:
        return None
    claimed = [r for r in held if r.dispatch_key is not None]
    if claimed:
        # An earlier dispatch claimed these and has not marked them sent: it is sending now,
        # or it died. Resend only once its claim is stale, and under the same key.
        if any(r.claimed_at is not None and r.claimed_at + s.dispatch_timeout > now for r in claimed):
            return None
        rows, key = claimed, claimed[0].dispatch_key
    else:
        last_sent = lease.last_sent if lease is not None else None
        gap_open = last_sent is None or now - last_sent >= s.outbox_gap
        if not gap_open and not any(r.urgent for r in held):
            return None
        rows, key = held, f"outbox-{held[0].id}"
    rows = sorted(rows, key=lambda r: (not r.urgent, r.id))  # urgent first, then in order
    ids = [r.id for r in rows]
    values: dict[str, Any] = {"dispatch_key": key, "claimed_at": now}
    if delivery == AT_MOST_ONCE:
        values["sent_at"] = now
        _touch_last_sent(conn, inbox, now)
    conn.execute(update(outbox).where(outbox.c.id.in_(ids)).values(**values))
    return OutgoingMessage(
        inbox=inbox,
        key=key,
        body="\n\n".join(r.body for r in rows),
        urgent=any(r.urgent for r in rows),
        message_ids=tuple(ids),
    )


def _mark_sent(conn: Connection, inbox: str, key: str, now: int) -> None:
    leases.lock(conn, inbox)
    conn.execute(update(outbox).where(outbox.c.dispatch_key == key, HELD).values(sent_at=now))
    _touch_last_sent(conn, inbox, now)


def _touch_last_sent(conn: Connection, inbox: str, now: int) -> None:
    leases.lock_or_create(conn, inbox)
    conn.execute(update(inboxes).where(inboxes.c.inbox == inbox).values(last_sent=now))


def due_inboxes(conn: Connection, s: StoreSettings, now: int, limit: int) -> list[str]:
    """Inboxes whose held messages a dispatch would send now: the gap has passed, an urgent
    message waits, or an earlier dispatcher's claim went stale."""
    last_sent = select(inboxes.c.last_sent).where(inboxes.c.inbox == outbox.c.inbox).scalar_subquery()
    sendable = or_(
        and_(outbox.c.dispatch_key.is_(None),
             or_(outbox.c.urgent, last_sent.is_(None), last_sent <= now - s.outbox_gap)),
        and_(outbox.c.dispatch_key.is_not(None),
             or_(outbox.c.claimed_at.is_(None), outbox.c.claimed_at <= now - s.dispatch_timeout)),
    )
    query = (select(outbox.c.inbox).where(HELD, sendable).group_by(outbox.c.inbox)
             .order_by(outbox.c.inbox).limit(limit))
    return list(conn.execute(query).scalars())


def view(conn: Connection, inbox: str) -> list[OutboxRow]:
    rows = conn.execute(select(outbox).where(outbox.c.inbox == inbox).order_by(outbox.c.id))
    return [OutboxRow(r.id, r.inbox, r.body, r.urgent, r.created, r.sent_at, r.dispatch_key) for r in rows]
