"""What an operator reads in the morning, and retention.

Read-only views across the rules, plus ``purge``: payloads of finished events go after the
retention period, but their dedupe keys stay for the dedupe window so a sender's late
redelivery is still refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, case, delete, func, select, update

from . import approvals as approval_rules
from . import counters as counter_rules
from . import inbox as inbox_rules
from . import grants as grant_rules
from . import rules
from . import spend as spend_rules
from .db import clock
from .inbox import EVENT_COLUMNS, to_event
from .records import Event, InboxStatus, InvalidCall, Outage, Rejection, RunRecord
from .transactions import Transactions
from .tables import approvals, audit, events, grants, inboxes, outbox, rejected, runs, status_is, timers

PURGE_BATCH = 5000  # rows per transaction: retention never holds a long lock


def status(conn: Connection, inbox: str, now: int) -> InboxStatus:
    lease = conn.execute(select(inboxes).where(inboxes.c.inbox == inbox)).one_or_none()
    counts = dict(
        conn.execute(
            select(events.c.status, func.count()).where(events.c.inbox == inbox).group_by(events.c.status)
        ).all()
    )
    oldest = conn.execute(
        select(func.min(events.c.created)).where(events.c.inbox == inbox, status_is("pending"))
    ).scalar()
    next_due = conn.execute(
        select(func.min(timers.c.due)).where(timers.c.inbox == inbox, ~timers.c.done)
    ).scalar()
    held = conn.execute(
        select(func.count()).where(outbox.c.inbox == inbox, outbox.c.sent_at.is_(None))
    ).scalar_one()
    outage = conn.execute(select(func.count(), func.min(events.c.outage_since)).where(
        events.c.inbox == inbox, status_is("pending"), events.c.outage_since.is_not(None))).one()
    live = lease is not None and lease.holder is not None and rules.lease_live(lease.lease_until, now)
    return InboxStatus(
        inbox=inbox,
        holder=lease.holder if live else None,
        generation=lease.generation if lease is not None else 0,
        lease_expires_in=lease.lease_until - now if live else None,
        pending=counts.get("pending", 0),
        running=counts.get("running", 0),
        done=counts.get("done", 0),
        dead=counts.get("dead", 0),
        oldest_pending_age=now - oldest if oldest is not None else None,
        next_timer_due=next_due,
        held_messages=held,
        last_sent=lease.last_sent if lease is not None else None,
        pending_approvals=len(approval_rules.view(conn, inbox, pending_only=True)),
        waiting_on_outage=outage[0],
        outage_since=outage[1],
    )


def metrics(conn: Connection, now: int) -> dict[str, Any]:
    """The queue's vital signs across all inboxes, for /metrics and ``wakeful status``."""
    by_status = dict(conn.execute(
        select(events.c.status, func.count())
        .where(status_is("pending", "running", "dead"))
        .group_by(events.c.status)).all())
    oldest = conn.execute(select(func.min(events.c.created)).where(status_is("pending"))).scalar()
    held = conn.execute(select(func.count()).select_from(outbox).where(outbox.c.sent_at.is_(None))).scalar_one()
    overdue = conn.execute(
        select(func.count()).select_from(timers).where(~timers.c.done, timers.c.due <= now)).scalar_one()
    refused = dict(conn.execute(select(rejected.c.origin, func.count()).group_by(rejected.c.origin)).all())
    outage = conn.execute(select(func.count(func.distinct(events.c.inbox)), func.min(events.c.outage_since))
                          .where(status_is("pending"), events.c.outage_since.is_not(None))).one()
    return {
        "events_pending": by_status.get("pending", 0),
        "events_running": by_status.get("running", 0),
        "events_dead": by_status.get("dead", 0),
        "oldest_pending_age": max(0, now - oldest) if oldest is not None else 0,
        "outbox_held": held,
        "timers_overdue": overdue,
        # Inboxes whose events wait out an outage (a run said "try later"), and for how long
        # the oldest has waited: an outage the agent cannot see past, the operator can.
        "inboxes_waiting_on_outage": outage[0],
        "outage_age": max(0, now - outage[1]) if outage[1] is not None else 0,
        "rejected": refused,
        "counters": counter_rules.read(conn),
        # The egress proxy's refused or failed requests {route: {outcome: n}} (store/grants.py).
        "proxy_not_ok": grant_rules.not_ok_counts(conn),
        # Today's spend per agent, budgets that stopped a call (store/spend.py).
        "budgets": spend_rules.metrics(conn, now),
    }


def attention(conn: Connection, now: int, limit: int) -> list[InboxStatus]:
    """The inboxes an operator should look at first: dead events, then the oldest waiting work."""
    waiting = (
        select(
            events.c.inbox,
            func.sum(case((status_is("dead"), 1), else_=0)).label("dead"),
            func.min(case((status_is("pending"), events.c.created))).label("oldest"),
        )
        .where(status_is("pending", "running", "dead"))
        .group_by(events.c.inbox)
        .subquery()
    )
    names = conn.execute(
        select(waiting.c.inbox)
        .order_by(waiting.c.dead.desc(), waiting.c.oldest.is_(None), waiting.c.oldest, waiting.c.inbox)
        .limit(limit)
    ).scalars().all()
    return [status(conn, name, now) for name in names]


def incidents(conn: Connection, since: int) -> dict[str, list[Any]]:
    """What went wrong since ``since``: events parked dead and approvals that expired; and
    what is going wrong now: an ``Outage`` for each inbox whose events wait one out."""
    dead = conn.execute(
        select(*EVENT_COLUMNS).where(status_is("dead"), events.c.finished >= since).order_by(events.c.id)
    ).all()
    expired = [
        e for e in conn.execute(
            select(*EVENT_COLUMNS).where(events.c.source == approval_rules.SOURCE, events.c.created >= since)
            .order_by(events.c.id)).all()
        if (e.payload or {}).get("answer") == "expired"
    ]
    outages = conn.execute(
        select(events.c.inbox, func.count(), func.min(events.c.outage_since))
        .where(status_is("pending"), events.c.outage_since.is_not(None))
        .group_by(events.c.inbox).order_by(func.min(events.c.outage_since), events.c.inbox)).all()
    return {"dead": [to_event(r) for r in dead], "expired_approvals": [to_event(r) for r in expired],
            "outages": [Outage(*r) for r in outages]}


def run_log(conn: Connection, inbox: str, limit: int) -> list[RunRecord]:
    rows = conn.execute(select(runs).where(runs.c.inbox == inbox).order_by(runs.c.id.desc()).limit(limit))
    return [
        RunRecord(r.id, r.inbox, r.generation, r.holder, r.started, r.finished, r.outcome, tuple(r.event_ids), r.error)
        for r in reversed(rows.all())
    ]


def purge(transactions: Transactions, older_than: int, now: int | None) -> dict[str, int]:
    """Retention, in short batches. Returns how many rows each step touched."""
    if not isinstance(older_than, int) or older_than < 0:
        raise InvalidCall(f"older_than must be a non-negative number of seconds, got {older_than!r}")
    with transactions.transaction() as conn:
        now = clock(conn, now)
    cutoff = now - older_than
    key_cutoff = now - max(older_than, transactions.settings.dedupe_window)
    # An approval's answer event is its stored answer: it stays whole while the approval
    # row does (a later answer call, or the expiry timer, must still find yes or no, not an
    # empty key to fill with "expired"), and goes after it, at the next purge.
    answer_of_kept_approval = (events.c.source == approval_rules.SOURCE) & (
        select(approvals.c.request_id).where(approvals.c.inbox == events.c.inbox,
                                             approvals.c.request_id == events.c.source_id).exists())
    finished = status_is("done", "dead") & ~answer_of_kept_approval
    counts = {
        "payloads": _in_batches(transactions, events, events.c.id, finished & (events.c.finished < cutoff)
                                & events.c.payload.is_not(None), {"payload": None}),
        "events": _in_batches(transactions, events, events.c.id, finished & (events.c.finished < key_cutoff)),
        "messages": _in_batches(transactions, outbox, outbox.c.id, outbox.c.sent_at < cutoff),
        "runs": _in_batches(transactions, runs, runs.c.id, runs.c.finished < cutoff),
        "rejected": _in_batches(transactions, rejected, rejected.c.id, rejected.c.received < cutoff),
        "audit": _in_batches(transactions, audit, audit.c.id, audit.c.at < cutoff),  # the proxy's
    }
    with transactions.transaction() as conn:
        counts["timers"] = conn.execute(
            delete(timers).where(timers.c.done, timers.c.due < cutoff)).rowcount
        counts["approvals"] = conn.execute(delete(approvals).where(approvals.c.deadline < key_cutoff)).rowcount
        # Expired grants of inboxes that never mint again (minting clears its own inbox's).
        counts["grants"] = conn.execute(delete(grants).where(grants.c.expires < now)).rowcount
        counts["spend"] = spend_rules.purge(conn, cutoff)  # whole days before the cutoff
    return counts


def _in_batches(transactions: Transactions, table, key, where, values=None) -> int:  # type: ignore[no-untyped-def]
    total = 0
    while True:
        with transactions.transaction() as conn:
            batch = select(key).where(where).limit(PURGE_BATCH).scalar_subquery()
            stmt = update(table).values(**values) if values else delete(table)
            n = conn.execute(stmt.where(key.in_(batch))).rowcount
        total += n
        if n < PURGE_BATCH:
            return total


class Operator:
    """The operator's views and actions across the rules (``store.operator``), one short
    transaction each."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def event(self, event_id: int) -> Event | None:
        """One event by id, whatever its status; None if there is none."""
        with self.transactions.transaction() as conn:
            return inbox_rules.event(conn, event_id)

    def run_log(self, inbox: str, *, limit: int = 100) -> list[RunRecord]:
        with self.transactions.transaction() as conn:
            return run_log(conn, inbox, limit)

    def metrics(self, *, now: int | None = None) -> dict[str, Any]:
        """Events pending/running/dead, oldest pending age, outbox held, timers overdue,
        rejections by origin, counters: across all inboxes."""
        with self.transactions.transaction() as conn:
            return metrics(conn, clock(conn, now))

    def attention(self, *, now: int | None = None, limit: int = 20) -> list[InboxStatus]:
        """Inboxes with dead events first, then those with the oldest waiting work."""
        with self.transactions.transaction() as conn:
            return attention(conn, clock(conn, now), limit)

    def incidents(self, since: int) -> dict[str, list[Any]]:
        """Events parked dead and approvals expired since ``since``: the daily summary."""
        with self.transactions.transaction() as conn:
            return incidents(conn, since)

    def record_rejection(self, origin: str, reason: str, *, inbox: Any = None, source: Any = None,
                         source_id: Any = None, excerpt: Any = None, now: int | None = None) -> None:
        """Keep refused input where an operator can see it: bounded, never the whole body."""
        with self.transactions.transaction() as conn:
            inbox_rules.record_rejection(conn, origin, reason, inbox, source, source_id, excerpt, now)

    def rejections(self, *, limit: int = 100) -> list[Rejection]:
        with self.transactions.transaction() as conn:
            return inbox_rules.rejections(conn, limit)

    def counters(self) -> dict[str, int]:
        with self.transactions.transaction() as conn:
            return counter_rules.read(conn)
