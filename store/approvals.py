"""Approvals: a run that needs a human ends; the answer or its expiry comes back as one event.

Both travel under one key, ``("approval", request_id)``, so only one of them is ever stored.
The expiry is a one-off timer that writes the ``expired`` answer; the answer path checks the
deadline itself in the same transaction instead of trusting that the scan already ran, so a
late yes is told ``expired`` even when the scheduler is behind.

**Approvers.** Who gets the link is an address: ``self`` (the inbox's own user, the default:
the request goes to the inbox's outbox), ``inbox:NAME`` (another inbox's outbox: an
operator), or ``channel:NAME`` (the named outbox channel ``WAKEFUL_CHANNEL_NAME``). For
another approver, the requester's outbox gets a notice without the link, and another once the
answer is settled. The link is signed for its approver (wakeful/approval_tokens.py), and the answer stores
who gave it (``by``) in the answer's event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import Connection, and_, select

from . import inbox as inbox_rules
from . import timers, validate
from .db import insert
from .records import Approval, ApprovalAnswer, InvalidCall, InvalidEvent
from wakeful.settings import StoreSettings
from .tables import approvals, events
from .transactions import Transactions

SOURCE = "approval"
ANSWERS = (ApprovalAnswer.YES, ApprovalAnswer.NO)
SELF = "self"
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_]{1,48}$")  # becomes WAKEFUL_CHANNEL_<NAME>


def approver(value: object) -> str:
    """The approver address, checked: ``self``, ``inbox:NAME`` or ``channel:NAME``.
    Raises ``InvalidCall`` (a ``ValueError``) saying what is wrong."""
    if value is None or value == SELF:
        return SELF
    if not isinstance(value, str):
        raise InvalidCall(f"an approver is self, inbox:NAME or channel:NAME, got {value!r}")
    kind, _, name = value.partition(":")
    if kind == "inbox" and name:
        validate.inbox(name)
        return value
    if kind == "channel" and _CHANNEL_NAME.match(name):
        return value
    if kind == "channel":
        raise InvalidCall(f"approver {value!r}: a channel name is 1-48 letters, digits or _ "
                         "(it names the variable WAKEFUL_CHANNEL_<NAME>)")
    raise InvalidCall(f"an approver is self, inbox:NAME or channel:NAME, got {value!r}")


def timer_id(request_id: str) -> str:
    return f"approval:{request_id}"


class ApprovalConflict(InvalidEvent):
    """A request id that is already taken in this inbox, by another action or by an answer."""


def request(conn: Connection, s: StoreSettings, inbox: str, request_id: str, action: str,
            expires_in: int, now: int, approver_address: str | None = None) -> bool:
    """Ask a human. The same request again (same id, same action) changes nothing: its
    deadline and any answer stand. The id asked for another action is ``ApprovalConflict``,
    so an answer is never inherited by a different question. True when the request is new."""
    routed = approver(approver_address)
    validate.name("request_id", request_id, timers.TIMER_ID_MAX - len("approval:"))
    validate.text_value("action", action)
    if not isinstance(expires_in, int) or isinstance(expires_in, bool) or expires_in <= 0:
        raise InvalidEvent(f"expires_in must be a positive number of seconds, got {expires_in!r}")
    deadline = now + expires_in
    created = conn.execute(
        insert(conn, approvals)
        .values(inbox=inbox, request_id=request_id, action=action, deadline=deadline, created=now,
                approver=None if routed == SELF else routed)
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
        return False
    if standing(conn, inbox, request_id) is not None:
        # The row is gone (retention) but its answer is not: that answer belongs to the
        # old question. Raising rolls the new row back.
        raise ApprovalConflict(f"approval {request_id!r} in inbox {inbox!r} was already "
                               "answered for an earlier request; use a new request id")
    timers.add(conn, s, inbox, timer_id(request_id), deadline,
               {"approval": request_id, "answer": str(ApprovalAnswer.EXPIRED), "action": action},
               key=(SOURCE, request_id), now=now)
    return True


def _short(text: str | None, limit: int = 80) -> str:
    return repr(text if text is None or len(text) <= limit else text[: limit - 1] + "…")


def answer(conn: Connection, s: StoreSettings, inbox: str, request_id: str, answer: str, now: int,
           by: str | None = None) -> str:
    """Store ``answer`` unless the deadline has passed; return the outcome that stands.
    ``by`` (who answered: the approver whose link was used, or ``cli``) is kept with it."""
    if answer not in ANSWERS:
        raise InvalidEvent(f"an approval answer is 'yes' or 'no', got {answer!r}")
    if by is not None:
        validate.name("by", by, 160)
    row = conn.execute(
        select(approvals.c.deadline, approvals.c.action).where(
            approvals.c.inbox == inbox, approvals.c.request_id == request_id)
    ).one_or_none()
    if row is None:
        return ApprovalAnswer.UNKNOWN
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
        # The answer takes the key the expiry would be stored under: that timer can never
        # fire anything, so it is done now, not shown live until its deadline. Its row first,
        # then the event: the order the timer scan takes them in (a deadlock otherwise). A
        # duplicate answer finds it done already, and an expiry that fired left it done.
        timers.settle(conn, inbox, timer_id(request_id))
        answered = {"approval": request_id, "answer": answer, "action": row.action}
        inbox_rules.insert_event(conn, inbox, SOURCE, request_id,
                                 answered if by is None else {**answered, "by": by}, now)
    return standing(conn, inbox, request_id) or ApprovalAnswer.EXPIRED


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
        answered = r.payload or {}
        out.append(Approval(r.inbox, r.request_id, r.action, r.deadline, r.created,
                            answered.get("answer") if r.payload is not None else None,
                            approver=r.approver or SELF, answered_by=answered.get("by")))
    return out


def approver_of(conn: Connection, inbox: str, request_id: str) -> str:
    routed = conn.execute(select(approvals.c.approver).where(
        approvals.c.inbox == inbox, approvals.c.request_id == request_id)).scalar()
    return routed or SELF


def approver_inboxes(conn: Connection, inboxes: Sequence[str]) -> list[str]:
    """The operator inboxes (``inbox:NAME`` approvers) of these inboxes' approvals that wait
    for an answer: their outboxes hold requests these inboxes' runs wrote."""
    answer_event = and_(events.c.inbox == approvals.c.inbox, events.c.source == SOURCE,
                        events.c.source_id == approvals.c.request_id)
    rows = conn.execute(select(approvals.c.approver).distinct()
                        .select_from(approvals.outerjoin(events, answer_event))
                        .where(approvals.c.inbox.in_(list(inboxes)), approvals.c.approver.like("inbox:%"),
                               events.c.id.is_(None)))
    return sorted(r.approver.partition(":")[2] for r in rows)


class Approvals:
    """The approvals' views (``store.approvals``); requesting and answering are the
    contract's calls on the Store."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def approvers(self, *inboxes: str) -> list[str]:
        """The operator inboxes that hold requests for these inboxes' approvals still waiting."""
        with self.transactions.transaction() as conn:
            return approver_inboxes(conn, inboxes)

    def view(self, inbox: str | None = None, *, pending_only: bool = True) -> list[Approval]:
        with self.transactions.transaction() as conn:
            return view(conn, inbox, pending_only)
