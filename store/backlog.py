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

from sqlalchemy import Connection, Select, bindparam, exists, select

from . import leases, plans, runs
from .db import NOW, dialect_insert
from .records import RunStart
from .settings import StoreSettings
from .tables import events, inboxes, memory, status_is

CANDIDATES = 8  # oldest ready inboxes looked at per take: enough for takers that race
TRIES = 3  # takes per call whose claim came back empty (its event was done meanwhile)

_live_lease = exists().where(inboxes.c.inbox == events.c.inbox, inboxes.c.lease_until >= NOW)


def _ready(skipping: bool) -> Select:
    """The oldest ready events of inboxes with no live lease (and not in ``p_skip``)."""
    where = [status_is("pending"), events.c.not_before <= NOW, ~_live_lease]
    if skipping:
        where.append(events.c.inbox.not_in(bindparam("p_skip", expanding=True)))
    return select(events.c.inbox, events.c.id).where(*where).order_by(events.c.id).limit(CANDIDATES)


def _take(skipping: bool) -> Select:
    """One statement: the first free inbox among the ready ones, locked, with what the lease
    decision needs (``leases.lock_or_create``'s columns). An inbox that has no row yet (never
    woken) is not among them: ``take_next`` makes the rows and asks again."""
    ready = _ready(skipping).subquery("ready")
    return (
        select(inboxes.c.inbox, inboxes.c.holder, inboxes.c.generation, inboxes.c.lease_until,
               NOW.label("now"), exists().where(memory.c.inbox == inboxes.c.inbox).label("has_memory"))
        .join_from(inboxes, ready, inboxes.c.inbox == ready.c.inbox)
        .where(inboxes.c.lease_until < NOW)
        .order_by(ready.c.id)
        .limit(1)
        .with_for_update(of=inboxes, skip_locked=True)
    )


_READY = _ready(skipping=True)
_TAKE = plans.cached(_take(skipping=False))  # a task's usual take: nothing to skip
_TAKE_SKIPPING = _take(skipping=True)  # after the task handed an inbox back


def take_next(conn: Connection, s: StoreSettings, holder: str, skip: Iterable[str],
              now: int | None) -> tuple[str, RunStart] | None:
    """(inbox, its RunStart) for the oldest ready inbox nobody holds, or None when there is
    none (or every candidate is being taken by someone else right now)."""
    params = {"p_now": now, "p_skip": list(skip)}
    take = _TAKE_SKIPPING if params["p_skip"] else _TAKE
    for _ in range(TRIES):
        row = plans.execute(conn, take, params).first()
        if row is None and _make_rows(conn, params):
            row = plans.execute(conn, take, params).first()
        if row is None:
            return None
        start = runs.start_decided(conn, s, row.inbox, holder, leases.judge(row, holder))
        if start.events:
            return row.inbox, start
    return None


def _make_rows(conn: Connection, params: dict) -> bool:
    """Rows for ready inboxes never woken before, so they can be locked; False when none
    is ready at all."""
    names = list(dict.fromkeys(conn.execute(_READY, params).scalars()))
    if not names:
        return False
    new_rows = dialect_insert(conn.dialect.name, inboxes).on_conflict_do_nothing(index_elements=["inbox"])
    conn.execute(new_rows, [{"inbox": name} for name in names])
    return True
