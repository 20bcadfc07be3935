"""Approvals: a run that needs a human ends; the answer or its expiry comes back as one event.

Both travel under one key, ``("approval", request_id)``, so only one of them is ever stored.
The expiry is a one-off timer that writes the ``expired`` answer; the answer path checks the
deadline itself in the same transaction instead of trusting that the scan already ran, so a
late yes is told ``expired`` even when the scheduler is behind.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, select

from . import inbox as inbox_rules
from . import timers, validate
from .db import insert
from .records import Approval, InvalidEvent
from .settings import StoreSettings
from .tables import approvals, events

SOURCE = "approval"
ANSWERS = ("yes", "no")


def timer_id(request_id: str) -> str:
    return f"approval:{request_id}"


class ApprovalConflict(InvalidEvent):
    """A request id that is already taken in this inbox, by another action or by an answer."""


def request(conn: Connection, s: StoreSettings, inbox: str, request_id: str, action: str,
            expires_in: int, now: int) -> None:
    """Ask a human. The same request again (same id, same action) changes nothing: its
    deadline and any answer stand. The id asked for another action is ``ApprovalConflict``,
    so an answer is never inherited by a different question."""
    validate.name("request_id", request_id, timers.TIMER_ID_MAX - len("approval:"))
    validate.text_value("action", action)
    if not isinstance(expires_in, int) or isinstance(expires_in, bool) or expires_in <= 0:
        raise InvalidEvent(f"expires_in must be a positive number of seconds, got {expires_in!r}")
    deadline = now + expires_in
    created = conn.execute(
        insert(conn, approvals)
        .values(inbox=inbox, request_id=request_id, action=action, deadline=deadline, created=now)
        .on_conflict_do_nothing(index_elements=["inbox", "request_id"])
        .returning(approvals.c.request_id)
    ).scalar()
    if created is None:
        asked = conn.execute(select(approvals.c.action).where(
            approvals.c.inbox == inbox, approvals.c.request_id == request_id)).scalar()
        if asked != action:
            raise ApprovalConflict(
                f"approval {request_id!r} in inbox {inbox!r} was already requested for another "
                f"action ({_short(asked)}); use a new request id")
        return
    if standing(conn, inbox, request_id) is not None:
        # The row is gone (retention) but its answer is not: that answer belongs to the
        # old question. Raising rolls the new row back.
        raise ApprovalConflict(f"approval {request_id!r} in inbox {inbox!r} was already "
                               "answered for an earlier request; use a new request id")
    timers.add(conn, s, inbox, timer_id(request_id), deadline,
               {"approval": request_id, "answer": "expired", "action": action},
               key=(SOURCE, request_id), now=now)


def _short(text: str | None, limit: int = 80) -> str:
    return repr(text if text is None or len(text) <= limit else text[: limit - 1] + "…")


def answer(conn: Connection, s: StoreSettings, inbox: str, request_id: str, answer: str, now: int) -> str:
    """Store ``answer`` unless the deadline has passed; return the outcome that stands."""
    if answer not in ANSWERS:
        raise InvalidEvent(f"an approval answer is 'yes' or 'no', got {answer!r}")
    row = conn.execute(
        select(approvals.c.deadline, approvals.c.action).where(
            approvals.c.inbox == inbox, approvals.c.request_id == request_id)
    ).one_or_none()
    if row is None:
        return "unknown"
    if now >= row.deadline:
        # Fire the expiry timer here: the same event the scan would store, under the same key.
        expiry = conn.execute(
            select(timers.timers).where(timers.timers.c.inbox == inbox,
                                        timers.timers.c.timer_id == timer_id(request_id),
                                        timers.LIVE).with_for_update()
        ).one_or_none()
        if expiry is not None:
            timers.fire(conn, s, [expiry], now)
    else:
        inbox_rules.insert_event(conn, inbox, SOURCE, request_id,
                                 {"approval": request_id, "answer": answer, "action": row.action}, now)
    return standing(conn, inbox, request_id) or "expired"


def standing(conn: Connection, inbox: str, request_id: str) -> str | None:
    """The stored answer (yes/no/expired), or None while nothing stands."""
    payload = conn.execute(
        select(events.c.payload).where(events.c.inbox == inbox, events.c.source == SOURCE,
                                       events.c.source_id == request_id)
    ).scalar()
    return payload.get("answer") if payload else None


def view(conn: Connection, inbox: str | None, pending_only: bool) -> list[Approval]:
    answer_event = and_(events.c.inbox == approvals.c.inbox, events.c.source == SOURCE,
                        events.c.source_id == approvals.c.request_id)
    query = select(approvals, events.c.payload).select_from(approvals.outerjoin(events, answer_event))
    if inbox is not None:
        query = query.where(approvals.c.inbox == inbox)
    if pending_only:
        query = query.where(events.c.id.is_(None))
    out = []
    for r in conn.execute(query.order_by(approvals.c.deadline)):
        out.append(Approval(r.inbox, r.request_id, r.action, r.deadline, r.created,
                            (r.payload or {}).get("answer") if r.payload is not None else None))
    return out
