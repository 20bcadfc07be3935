"""The next inbox a free worker takes, straight from the database: the throughput path.

A doorbell (a Celery message naming one inbox) is the latency path: an idle inbox is served
as soon as its message arrives. But a message per wake costs the broker as much as the wake
costs the store, and a broker that lost its messages leaves a backlog that only the sweep
rings again, a bounded number of inboxes per interval. So a run task whose own inbox has
gone idle asks for the next one here: the inbox with the oldest ready event and no live
lease, leased and claimed in the same transaction.

Concurrent takers never wait for each other: candidates come from the pending-events index
in arrival order (so no inbox waits behind a hot one: a leased inbox's events are passed
over), and the inbox row is locked with ``SKIP LOCKED`` (PostgreSQL; SQLite's writers are
serialized anyway). The lease itself is then decided exactly as a doorbell's would be.
"""

from __future__ import annotations

from collections.abc import Iterable

from typing import Any

from sqlalchemy import Connection, Integer, Select, bindparam, exists, literal_column, select, true

from . import leases, plans, rules, runlog, steps
from .db import NOW
from .records import RunStart
from wakeful.settings import StoreSettings
from .tables import events, inboxes, memory
from .tables import runs as runs_log

CANDIDATES = 32  # oldest ready events looked at per take: a dense worker has tens of takers racing
ROUNDS = 4  # looks per take: past candidates other takers hold, or whose event was done meanwhile

# ``now`` as the take compares it: a subquery, opaque to the planner whether or not the
# caller passed ``p_now``. A known value lets each custom plan count the ready rows exactly,
# which the generic plan cannot, so PostgreSQL kept planning the take afresh on every call
# (measured: 0 generic plans in 3,095 executions, ~0.4 ms of planning each, inside the
# release-and-take statement below). Opaque, both estimate alike and the generic plan stays.
_now = select(NOW).scalar_subquery()


def _literal(n: int) -> Any:
    """A LIMIT written into the statement: a generic plan assumes a LIMIT parameter keeps a
    tenth of the rows (the same estimate gap as ``_now``)."""
    return literal_column(str(int(n)), Integer())


def _ready(skipping: bool) -> Select:
    """The oldest ready events of inboxes with no live lease (and not in ``p_skip``)."""
    where = [rules.due(events, _now), ~rules.leased(events, _now)]
    if skipping:
        where.append(events.c.inbox.not_in(bindparam("p_skip", expanding=True)))
    return select(events.c.inbox, events.c.id).where(*where).order_by(events.c.id).limit(_literal(CANDIDATES))


def _take(skipping: bool) -> Select:
    """One statement: the first free inbox among the ready ones, locked, with what the lease
    decision needs (``leases.lock_or_create``'s columns). An inbox that has no row yet (never
    woken) is not among them: ``take_next`` makes the rows and asks again."""
    ready = _ready(skipping).subquery("ready")
    return (
        select(inboxes.c.inbox, inboxes.c.holder, inboxes.c.generation, inboxes.c.lease_until,
               NOW.label("now"), exists().where(memory.c.inbox == inboxes.c.inbox).label("has_memory"))
        .join_from(inboxes, ready, inboxes.c.inbox == ready.c.inbox)
        .where(~rules.lease_live(inboxes.c.lease_until, _now))
        .order_by(ready.c.id)
        .limit(_literal(1))
        .with_for_update(of=inboxes, skip_locked=True)
    )


def _log_resign_and_take() -> Select:
    """``runlog.LOG_AND_RESIGN_OR_EXTEND`` and, if it resigned, ``_TAKE``: a draining worker's
    release and the lock on the inbox it takes next in one round trip. The take's snapshot
    is the statement's, so it sees the released inbox as still leased and passes it over;
    the claim that follows (``take_and_claim``) is a statement of its own, after the lock,
    as on every other path. One row: ``kept_by`` (the resign's holder column: NULL when it
    resigned), then ``_TAKE``'s columns (NULL when it took nothing)."""
    resign = leases.RESIGN_OR_EXTEND.statement.cte("resign")
    take = _take(skipping=False).where(select(resign.c.holder).scalar_subquery().is_(None)).cte("take")
    return (select(resign.c.holder.label("kept_by"), *take.c).select_from(resign.outerjoin(take, true()))
            .add_cte(runlog.LOG_RUN.returning(runs_log.c.id).cte("run_log")))


_READY = _ready(skipping=True)
_TAKE = plans.cached("take", _take(skipping=False))  # a task's usual take: nothing to skip
_TAKE_SKIPPING = _take(skipping=True)  # after the task handed an inbox back
LOG_RESIGN_AND_TAKE = plans.cached("log_resign_and_take", _log_resign_and_take())


def take_next(conn: Connection, s: StoreSettings, holder: str, skip: Iterable[str],
              now: int | None, looked: Any = None) -> tuple[str, RunStart] | None:
    """(inbox, its RunStart) for the oldest ready inbox nobody holds, or None when none is
    ready. ``looked``: the row of a ``LOG_RESIGN_AND_TAKE`` the caller sent, whose take
    stands for the first one here.

    Candidates every one of which another taker has locked right now (``SKIP LOCKED``
    passed them all) do not mean the backlog is empty: the take looks again past them, up
    to ``ROUNDS`` times. Answering None there ended the drains of a dense worker's many
    takers while hundreds of inboxes were ready (measured: 18 of 20 racing takers gave up
    with ~390 of 400 inboxes left), leaving them to the sweep."""
    passed_over: list[str] = []  # candidates other takers were locking: looked past
    skip = list(skip)
    for _ in range(ROUNDS):
        params = {"p_now": now, "p_skip": skip + passed_over}
        take = _TAKE_SKIPPING if params["p_skip"] else _TAKE
        row = plans.execute(conn, take, params).first() if looked is None else looked
        looked = None
        if row is not None and row.inbox is None:
            row = None  # the caller's statement took nothing
        if row is None:
            candidates = list(dict.fromkeys(conn.execute(_READY, params).scalars()))
            if not candidates:
                return None  # nothing is ready
            leases.create_rows(conn, candidates)  # a never-woken inbox has no row to lock yet
            row = plans.execute(conn, take, params).first()
            if row is None:
                passed_over += candidates
                continue
        start = steps.start_decided(conn, s, row.inbox, holder, leases.judge(row, holder))
        if start.events:
            return row.inbox, start
        passed_over.append(row.inbox)  # its event was done meanwhile
    return None
